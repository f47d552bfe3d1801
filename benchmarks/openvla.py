"""OpenVLA on CPU: chunk latency, token by token (OpenVLA) against one parallel pass (OFT), and the
peak memory of loading a checkpoint straight into bfloat16.

Config: the real vision backbone (DINOv2 ViT-L/14 with registers + SigLIP so400m/14, 224 px), the
real 32064-token vocabulary and a scaled-down Llama (``LLAMA`` below), random weights, batch 1,
float32 for latency, 2 threads. A chunk is ``CHUNK`` actions of 7 dims: OpenVLA decodes 7 tokens per
action (so ``CHUNK`` prompts), OFT decodes all ``CHUNK * 7`` tokens in one pass.

Memory: the model is written as a ``model.safetensors`` in bfloat16, then loaded in bf16 by our loader
in a fresh process and every weight read once (so memory-mapped pages are resident too); figures are
the process's peak RSS (VmHWM), its RSS just before loading (Python, torch, transformers), and both
over the weights' bf16 size (target <= 1.3x).

    python benchmarks/openvla.py [--rounds 3]   -> benchmarks/results/openvla.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LLAMA = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
             num_key_value_heads=16, vocab_size=32064, pad_token_id=32000)  # fmt: skip
MEMORY_LLAMA = dict(
    LLAMA, hidden_size=2048, intermediate_size=5504, num_attention_heads=32, num_key_value_heads=32
)
CHUNK, ACTION_DIM, THREADS = 8, 7, 2


def rss_mb(field: str = "VmHWM") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def write_folder(folder: Path, llama: dict, dtype: str) -> int:
    """A random OpenVLA folder (config.json, tokenizer-free) with the real vision backbone; returns its parameter count."""
    import torch
    from safetensors.torch import save_file

    from policies.vla.openvla.checkpoint import read_checkpoint
    from policies.vla.openvla.model import build_model

    reference = json.loads(
        (ROOT.parent / "shared" / "vla_reference" / "openvla" / "model" / "config.json").read_text()
    )
    config = {**reference, "text_config": {"model_type": "llama", **llama}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    model = build_model(read_checkpoint(folder))
    generator = torch.Generator().manual_seed(0)
    torch_dtype = getattr(torch, dtype)
    tensors = {
        name: (torch.randn(p.shape, generator=generator) * 0.02).to(torch_dtype)
        for name, p in model.named_parameters()
    }
    save_file(tensors, str(folder / "model.safetensors"))
    return sum(t.numel() for t in tensors.values())


def latency(folder: Path, rounds: int) -> dict:
    import torch

    from policies.vla.openvla.checkpoint import load_weights, read_checkpoint
    from policies.vla.openvla.model import build_model, generate
    from policies.vla.openvla.oft import parallel_pass

    torch.set_num_threads(THREADS)
    model = build_model(read_checkpoint(folder))
    load_weights(model, folder, torch.float32, "cpu")
    model.eval()
    pixels = torch.rand(1, 6, 224, 224) * 2 - 1
    tokens = torch.randint(3, 31000, (1, 28))
    tokens[0, 0] = 1
    mask = torch.ones_like(tokens)
    rows: dict[str, list[float]] = {"autoregressive": [], "parallel": []}
    with torch.no_grad():
        for i in range(rounds + 1):
            start = time.perf_counter()
            for _ in range(CHUNK):  # OpenVLA: one prompt per action, 7 tokens each
                generate(model, model.prompt(pixels, tokens, mask), ACTION_DIM, lambda x: x.argmax(-1))
            ar = time.perf_counter() - start
            start = time.perf_counter()
            parallel_pass(model, model.prompt(pixels, tokens, mask), CHUNK * ACTION_DIM)
            par = time.perf_counter() - start
            if i > 0:
                rows["autoregressive"].append(ar)
                rows["parallel"].append(par)
    out = {k: {"median_s": statistics.median(v), "times_s": v} for k, v in rows.items()}
    out["speedup"] = out["autoregressive"]["median_s"] / out["parallel"]["median_s"]
    out["params"] = sum(p.numel() for p in model.parameters())
    return out


def load_once(folder: str) -> None:
    """Run in a fresh process: load in bf16, print the RSS figures as JSON."""
    import torch

    import policies.vla.openvla.model  # noqa: F401 (transformers and torch imported before the baseline)
    from policies.vla.openvla.checkpoint import load_weights, read_checkpoint
    from policies.vla.openvla.model import build_model

    before = rss_mb("VmRSS")
    start = time.perf_counter()
    model = build_model(read_checkpoint(folder))
    load_weights(model, Path(folder), torch.bfloat16, "cpu")
    with torch.no_grad():  # read every weight once, so none is left un-paged from the file
        checksum = float(sum(p.sum().float() for p in model.parameters()))
    seconds = time.perf_counter() - start
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    print(
        json.dumps(
            {
                "rss_before_mb": before,
                "peak_rss_mb": rss_mb(),
                "load_s": seconds,
                "dtypes": dtypes,
                "checksum": checksum,
            }
        )
    )


def memory(workdir: Path) -> dict:
    folder = workdir / "memory"
    params = write_folder(folder, MEMORY_LLAMA, "bfloat16")
    out = subprocess.run(
        [sys.executable, __file__, "--load-once", str(folder)], capture_output=True, text=True, check=True
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    bf16_mb = params * 2 / 2**20
    return {
        "params": params,
        "bf16_mb": bf16_mb,
        **figures,
        "peak_over_bf16": figures["peak_rss_mb"] / bf16_mb,
        "loaded_over_bf16": (figures["peak_rss_mb"] - figures["rss_before_mb"]) / bf16_mb,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--load-once", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_once:
        load_once(args.load_once)
        return
    with tempfile.TemporaryDirectory() as tmp:
        print("[openvla] memory: loading a random checkpoint in bf16 ...", flush=True)
        mem = memory(Path(tmp))
        print(f"  {mem['params'] / 1e9:.2f} B params, {mem['bf16_mb']:.0f} MB in bf16: peak RSS {mem['peak_rss_mb']:.0f} MB "
              f"({mem['peak_over_bf16']:.2f}x; {mem['loaded_over_bf16']:.2f}x over the {mem['rss_before_mb']:.0f} MB "
              "before loading; target <= 1.3x)", flush=True)  # fmt: skip
        print("[openvla] latency: a chunk of 8 x 7, token by token vs one parallel pass ...", flush=True)
        folder = Path(tmp) / "latency"
        write_folder(folder, LLAMA, "float32")
        lat = latency(folder, args.rounds)
    ar, par = lat["autoregressive"]["median_s"], lat["parallel"]["median_s"]
    print(
        f"  autoregressive {ar:.2f} s/chunk, parallel (OFT) {par:.2f} s/chunk: {lat['speedup']:.1f}x",
        flush=True,
    )
    result = {"llama": LLAMA, "memory_llama": MEMORY_LLAMA, "chunk": CHUNK, "action_dim": ACTION_DIM,
              "threads": THREADS, "rounds": args.rounds, "latency": lat, "memory": mem}  # fmt: skip
    target = ROOT / "benchmarks" / "results" / "openvla.json"
    target.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
