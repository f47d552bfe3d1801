"""π0 chunk inference on CPU: ours (transformers' PI0 behind ``policies.vla.pi``) against LeRobot
0.6.1's ``PI0Pytorch`` at the same dims, random weights, same input sizes, in one run.

Config (both sides): the real SigLIP so400m/14 at 224 px, two cameras, 48 prompt tokens, the real
257152 vocabulary, a 512-wide 6-layer PaliGemma Gemma and a 256-wide 6-layer expert (a scaled-down
π0 that fits this 2-core box twice), chunk 50, 10 Euler steps, batch 1, float32, 2 threads.
Figures: median seconds per chunk over ``--rounds`` after one warm-up, and peak RSS; LeRobot's
side runs in LeRobot's side venv (``scripts/lerobot_venv.sh``) as a subprocess.

    python benchmarks/vla_inference.py [--rounds 5]   -> benchmarks/results/vla_inference.json
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
LEROBOT_PYTHON = ROOT / ".venv-lerobot" / "bin" / "python"
CONFIG = {
    "paligemma": {
        "width": 512,
        "depth": 6,
        "mlp_dim": 2048,
        "num_heads": 8,
        "num_kv_heads": 1,
        "head_dim": 64,
    },
    "action_expert": {
        "width": 256,
        "depth": 6,
        "mlp_dim": 1024,
        "num_heads": 8,
        "num_kv_heads": 1,
        "head_dim": 64,
    },
    "chunk_size": 50,
    "batch": 1,
    "cameras": 2,
    "tokens": 48,
    "threads": 2,
}


def peak_rss_mb() -> float:
    """This process's resident high-water mark (VmHWM: unlike ru_maxrss, not inherited across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def ours(rounds: int) -> dict:
    import torch

    from policies.vla.pi.dims import GemmaDims, PiDims
    from policies.vla.pi.models import build_flow_model, euler_sample
    from policies.vla.pi.policy import _random_init

    torch.set_num_threads(CONFIG["threads"])
    dims = PiDims(
        family="pi0",
        vlm=GemmaDims(**CONFIG["paligemma"]),
        expert=GemmaDims(**CONFIG["action_expert"]),
        projection_dim=CONFIG["paligemma"]["width"],
        chunk_size=CONFIG["chunk_size"],
    )
    model = build_flow_model(dims)
    _random_init(model)
    model.eval()
    batch, cameras, tokens = CONFIG["batch"], CONFIG["cameras"], CONFIG["tokens"]
    pixels = torch.rand(batch, cameras, 3, 224, 224) * 2 - 1
    camera_mask = torch.ones(batch, cameras, dtype=torch.bool)
    ids = torch.randint(10, 1000, (batch, tokens))
    mask = torch.ones(batch, tokens, dtype=torch.bool)
    state = torch.randn(batch, 32)
    noise = torch.randn(batch, CONFIG["chunk_size"], 32)
    times = []
    with torch.no_grad():
        for i in range(rounds + 1):
            start = time.perf_counter()
            prefix = model.encode_prefix(pixels, camera_mask, ids, mask)
            euler_sample(model, prefix, state, noise, 10)
            if i > 0:
                times.append(time.perf_counter() - start)
    peak_mb = peak_rss_mb()
    params = sum(p.numel() for p in model.parameters())
    return {"median_s": statistics.median(times), "times_s": times, "peak_rss_mb": peak_mb, "params": params}


def lerobot(rounds: int) -> dict:
    if not LEROBOT_PYTHON.is_file():
        raise SystemExit(f"no LeRobot side venv at {LEROBOT_PYTHON}: run bash scripts/lerobot_venv.sh")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(CONFIG, f)
    script = ROOT / "benchmarks" / "peers" / "lerobot_pi0_latency.py"
    out = subprocess.run(
        [str(LEROBOT_PYTHON), str(script), f.name, str(rounds)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("[vla_inference] ours ...", flush=True)
    mine = ours(args.rounds)
    print(f"  ours: {mine['median_s']:.3f} s/chunk, peak RSS {mine['peak_rss_mb']:.0f} MB", flush=True)
    print("[vla_inference] LeRobot 0.6.1 (side venv) ...", flush=True)
    theirs = lerobot(args.rounds)
    print(f"  LeRobot: {theirs['median_s']:.3f} s/chunk, peak RSS {theirs['peak_rss_mb']:.0f} MB", flush=True)
    ratio = mine["median_s"] / theirs["median_s"]
    print(f"  ours / LeRobot latency: {ratio:.2f}x (target <= 1.0x)")
    result = {
        "config": CONFIG,
        "rounds": args.rounds,
        "ours": mine,
        "lerobot": theirs,
        "latency_ratio": ratio,
    }
    target = ROOT / "benchmarks" / "results" / "vla_inference.json"
    target.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
