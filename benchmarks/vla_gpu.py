"""π0 at its published size on a GPU: random weights of the real shapes (PaliGemma 3B: SigLIP
so400m/14 + Gemma 2B, and the Gemma 300M expert; 3.5 B parameters), written in openpi's PyTorch
layout and loaded through ``policy.vla.checkpoint`` in bfloat16, as a user's checkpoint is.

Figures, one run: the load's time and peak host memory; chunk latency (batch 1, chunk 50,
10 denoising steps, median over ``--rounds``) and its peak GPU memory; one PPO update (``--batch``
decisions, one epoch, one minibatch, median over ``--rounds`` after a warm-up) with LoRA and with
full finetuning (the vision tower frozen, as by default), collocated on one GPU with and without
offload: without, the rollout's copy of the model and the actor's (with its optimiser state) are on
the GPU together; with, each waits in host memory while the other works, and a swap's seconds are
measured. Peak GPU memory per arm.

    python benchmarks/vla_gpu.py                  # a CUDA GPU -> benchmarks/results/vla_gpu.json
    python benchmarks/vla_gpu.py --device cpu --dims ../shared/vla_reference/pi0/tiny_dims.json \
        --out /tmp/vla_gpu.json                   # the same code at the fixtures' tiny size
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sim_envs  # noqa: E402
from benchmarks.vla_inference import peak_rss_mb  # noqa: E402
from policies import PolicyConfig, make_policy  # noqa: E402
from policies.config import VLAConfig  # noqa: E402
from policies.vla.pi.dims import PiDims, with_dims_file  # noqa: E402
from policies.vla.pi.export import TIED_EMBEDDING, TIED_HEAD  # noqa: E402 (openpi stores the tied pair once)
from policies.vla.pi.models import build_flow_model  # noqa: E402
from protos.batch import stack_obs  # noqa: E402
from trainer.algorithms.common import OnPolicyBatch  # noqa: E402
from trainer.algorithms.ppo import PPO, PPOConfig  # noqa: E402
from trainer.devices import move_placed, release_cached_memory  # noqa: E402

TOKENIZER = ROOT.parent / "shared" / "vla_reference" / "pi0" / "paligemma_tokenizer"
ENV = "rlinf/FrankaReach-v0"
CPU = torch.device("cpu")


def write_random_checkpoint(
    folder: Path, dims: PiDims, state_dim: int, action_dim: int, seed: int = 0
) -> int:
    """An openpi-layout folder (``model.safetensors`` in bf16, ``config.json``, the norm stats) with
    random weights of ``dims``' shapes; returns the parameter count."""
    from safetensors.torch import save_file

    model = build_flow_model(dims)  # on the meta device: shapes only
    shapes = model.state_dict()  # meta tensors
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for ours, theirs in model.state_dict_names().items():
        shape = shapes[ours].shape
        if ours.endswith("norm.weight") or "layernorm" in ours or "layer_norm" in ours:
            value = torch.ones(shape) if "vision_tower" in ours else torch.zeros(shape)  # Gemma: 1 + w
        elif ours.endswith("bias"):
            value = torch.zeros(shape)
        else:
            value = torch.randn(shape, generator=generator) * 0.02
        tensors[TIED_HEAD if theirs == TIED_EMBEDDING else theirs] = value.bfloat16()
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "action_dim": dims.max_action_dim,
        "action_horizon": dims.chunk_size,
        "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m",
        "precision": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))

    def stats(dim: int) -> dict[str, list[float]]:
        return {"mean": [0.0] * dim, "std": [1.0] * dim, "q01": [-1.0] * dim, "q99": [1.0] * dim}

    norm_stats = {"norm_stats": {"state": stats(state_dim), "actions": stats(action_dim)}}
    (folder / "assets" / "bench").mkdir(parents=True, exist_ok=True)
    (folder / "assets" / "bench" / "norm_stats.json").write_text(json.dumps(norm_stats))
    return sum(t.numel() for t in tensors.values())


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_gpu_mb(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        release_cached_memory(device)
        torch.cuda.reset_peak_memory_stats(device)


def timed(fn: Callable[[], object], device: torch.device) -> float:
    synchronize(device)
    tick = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - tick


def policy_config(folder: Path, dims_file: str, chunk: int, lora_rank: int) -> PolicyConfig:
    vla = VLAConfig(
        checkpoint=str(folder), tokenizer=str(TOKENIZER), dims=dims_file, dtype="bfloat16",
        flow_steps=10, lora_rank=lora_rank, flow_noise_level=0.5,
    )  # fmt: skip
    return PolicyConfig(kind="vla", cameras=["front"], chunk_size=chunk, vla=vla)


def decision_batch(obs: dict, out, device: torch.device) -> OnPolicyBatch:
    """One decision of each env, each ending its episode, rewards alternating 1 / 0."""
    n = out.log_prob.shape[0]
    ones = torch.ones(1, n)
    return OnPolicyBatch(
        obs={"state": obs["state"][None], "images": {"front": obs["images"]["front"][None]},
             "instruction": [obs["instruction"]]},
        samples=out.samples[None].cpu(), log_probs=out.log_prob[None].cpu(),
        values=out.value[None].cpu(), rewards=torch.tensor([[float(i % 2) for i in range(n)]]),
        dones=ones, terminated=ones, bootstrap_values=torch.zeros(1, n), last_obs=obs,
    ).to(device)  # fmt: skip


def ppo_arm(args, folder: Path, env, obs, lora_rank: int, offload: bool, device: torch.device) -> dict:
    """Collocated rollout + actor: act on the batch, then one PPO update; ``--rounds`` times."""
    rollout = make_policy(env.env_spec, policy_config(folder, args.dims, args.chunk, lora_rank)).to(device)
    actor = make_policy(env.env_spec, policy_config(folder, args.dims, args.chunk, lora_rank)).to(device)
    ppo = PPO(actor, PPOConfig(learning_rate=1e-5, update_epochs=1, num_minibatches=1))
    trainable = sum(p.numel() for p in actor.parameters() if p.requires_grad)
    reset_peak(device)
    updates, swaps = [], []
    for _ in range(args.rounds + 1):  # the first round allocates the optimiser state: a warm-up
        if offload:
            swaps.append(timed(lambda: move_placed([actor], [ppo.optimizer], CPU, device), device))
            swaps.append(timed(lambda: move_placed([rollout], [], device, device), device))
        with torch.no_grad():
            out = rollout.act(obs)
        batch = decision_batch(obs, out, device)
        if offload:
            swaps.append(timed(lambda: move_placed([rollout], [], CPU, device), device))
            swaps.append(timed(lambda: move_placed([actor], [ppo.optimizer], device, device), device))
        updates.append(timed(lambda: ppo.update(batch), device))  # noqa: B023 (called at once)
    result = {
        "trainable_parameters": trainable,
        "update_s_median": statistics.median(updates[1:]),
        "update_s": updates,
        "peak_gpu_mb": peak_gpu_mb(device),
    }
    if offload:
        result["swap_s_median"] = statistics.median(swaps[4:])  # one offload or onload, after warm-up
    return result


def load_and_act(args, folder: Path, env, one: dict, device: torch.device) -> tuple[dict, dict]:
    """Load the checkpoint as a user's (bf16, no LoRA) and time greedy chunks on one observation."""
    reset_peak(device)
    tick = time.perf_counter()
    policy = make_policy(env.env_spec, policy_config(folder, args.dims, args.chunk, 0)).to(device)
    synchronize(device)
    load = {
        "seconds": time.perf_counter() - tick,
        "peak_rss_mb": peak_rss_mb(),
        "gpu_mb": peak_gpu_mb(device),
    }
    reset_peak(device)
    with torch.no_grad():
        policy.act(one, "greedy")  # warm-up
        times = [timed(lambda: policy.act(one, "greedy"), device) for _ in range(args.rounds)]
    return load, {"median_s": statistics.median(times), "times_s": times, "peak_gpu_mb": peak_gpu_mb(device)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dims", default="", help="a tiny_dims.json: other sizes than the published ones")
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--batch", type=int, default=8, help="decisions per PPO update")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument(
        "--work", default="", help="where the random checkpoint is written (default: a temp dir)"
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "vla_gpu.json"))
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "benchmarks/vla_gpu.py: no CUDA GPU here (for the same code at tiny size: --device cpu --dims ...)"
        )
    dims = with_dims_file(PiDims(family="pi0", chunk_size=args.chunk), args.dims or None)
    args.chunk = dims.chunk_size
    env = sim_envs.make(ENV, cameras=("front",), image_height=224, image_width=224)
    state_dim, action_dim = env.env_spec.state_dim, env.env_spec.action.dim
    one = stack_obs([env.reset(seed=0)[0]])
    many = stack_obs([env.reset(seed=i)[0] for i in range(args.batch)])
    report: dict = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dims": {"vlm": asdict(dims.vlm), "expert": asdict(dims.expert), "vision": asdict(dims.vision)},
        "chunk": args.chunk, "flow_steps": 10, "batch": args.batch, "rounds": args.rounds,
        "lora_rank": args.lora_rank, "dtype": "bfloat16", "env": ENV,
    }  # fmt: skip
    with tempfile.TemporaryDirectory(dir=args.work or None) as work:
        folder = Path(work) / "pi0_random"
        print(f"[vla_gpu] writing a random π0 of the real shapes to {folder} ...", flush=True)
        tick = time.perf_counter()
        report["parameters"] = write_random_checkpoint(folder, dims, state_dim, action_dim)
        report["write_s"] = time.perf_counter() - tick
        print(f"  {report['parameters'] / 1e6:,.1f} M parameters, {report['write_s']:.0f} s", flush=True)

        report["load"], report["chunk_latency"] = load_and_act(args, folder, env, one, device)
        release_cached_memory(device)
        print(f"  loaded in {report['load']['seconds']:.1f} s; chunk "
              f"{report['chunk_latency']['median_s'] * 1e3:.0f} ms median", flush=True)  # fmt: skip

        report["ppo_update"] = {}
        for name, rank in (("lora", args.lora_rank), ("full", 0)):
            for offload in (False, True):
                arm = f"{name}_{'offload' if offload else 'no_offload'}"
                print(f"[vla_gpu] PPO update, {arm} ...", flush=True)
                try:
                    report["ppo_update"][arm] = ppo_arm(args, folder, env, many, rank, offload, device)
                except torch.cuda.OutOfMemoryError as exc:
                    report["ppo_update"][arm] = {"out_of_memory": str(exc).splitlines()[0]}
                release_cached_memory(device)
                print(f"  {json.dumps(report['ppo_update'][arm])}", flush=True)
    env.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
