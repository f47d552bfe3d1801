"""LeRobot 0.6.1's own π0 (``PI0Pytorch.sample_actions``) timed at given dims, random weights.

Runs in the LeRobot side venv (``scripts/lerobot_venv.sh``); ``benchmarks/vla_inference.py``
starts it. LeRobot builds only the published Gemma variants, PaliGemma's 257152 vocabulary and a
2048-wide projector, so (as the reference fixtures' generator did) ``get_gemma_config`` returns the
dims asked for and the projector is sized to the Gemma width; nothing else of LeRobot's is touched.

    python lerobot_pi0_latency.py DIMS.json ROUNDS  -> one JSON line on stdout
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from lerobot.policies.pi0 import modeling_pi0
from lerobot.policies.pi0.configuration_pi0 import PI0Config


def peak_rss_mb() -> float:
    """This process's resident high-water mark (VmHWM: unlike ru_maxrss, not inherited across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    with open(sys.argv[1]) as f:
        dims = json.load(f)
    rounds = int(sys.argv[2])
    torch.set_num_threads(int(dims.get("threads", torch.get_num_threads())))
    gemma = {name: modeling_pi0.GemmaConfig(**dims[name]) for name in ("paligemma", "action_expert")}
    modeling_pi0.get_gemma_config = lambda variant: gemma[
        "paligemma" if variant == "gemma_2b" else "action_expert"
    ]
    original = modeling_pi0.PaliGemmaForConditionalGenerationWithPiGemma.__init__

    def sized(self, config, *args, **kwargs):
        config.projection_dim = dims["paligemma"]["width"]
        config.vision_config.projection_dim = dims["paligemma"]["width"]
        original(self, config, *args, **kwargs)

    modeling_pi0.PaliGemmaForConditionalGenerationWithPiGemma.__init__ = sized
    config = PI0Config(
        chunk_size=dims["chunk_size"], n_action_steps=dims["chunk_size"], dtype="float32", device="cpu"
    )
    torch.manual_seed(0)
    model = modeling_pi0.PI0Pytorch(config).eval()
    batch, cameras, tokens = dims["batch"], dims["cameras"], dims["tokens"]
    images = [torch.rand(batch, 3, 224, 224) * 2 - 1 for _ in range(cameras)]
    masks = [torch.ones(batch, dtype=torch.bool) for _ in range(cameras)]
    lang = torch.randint(10, 1000, (batch, tokens))
    lang_mask = torch.ones(batch, tokens, dtype=torch.bool)
    state = torch.randn(batch, 32)
    noise = torch.randn(batch, dims["chunk_size"], 32)
    times = []
    with torch.no_grad():
        for i in range(rounds + 1):
            start = time.perf_counter()
            model.sample_actions(images, masks, lang, lang_mask, state, noise=noise)
            if i > 0:  # the first is warm-up
                times.append(time.perf_counter() - start)
    peak_mb = peak_rss_mb()
    params = sum(p.numel() for p in model.parameters())
    print(
        json.dumps(
            {"median_s": statistics.median(times), "times_s": times, "peak_rss_mb": peak_mb, "params": params}
        )
    )


if __name__ == "__main__":
    main()
