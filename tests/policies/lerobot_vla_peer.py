"""LeRobot 0.6.1's own π0 / π0.5 / SmolVLA on a LeRobot-layout folder: the chunk LeRobot's users get.

Runs in the LeRobot side venv (``scripts/lerobot_venv.sh``), started by
``tests/policies/test_lerobot_vla_reload.py``; it imports nothing of this project. The steps are
the reference fixtures' (``../shared/vla_reference/NOTES.md``): ``PI0Policy.from_pretrained`` (or
π0.5's, SmolVLA's), the folder's own pre/post-processors with the tokenizer named by path, uint8
images / 255, ``predict_action_chunk(batch, noise=...)``, then the post-processor.

At tiny size LeRobot's π0 / π0.5 need what the fixtures' generator did: ``get_gemma_config`` returns
the dims file's sizes for the variant names, and PaliGemma's hard-coded vocabulary, SigLIP and
projector sizes are rewritten just before the modules are built. LeRobot's ``from_pretrained``
only prints a warning when keys do not fit, so every tensor of the file is compared with the
loaded model's here, and any that differs is an error.

    python lerobot_vla_peer.py FOLDER INPUTS.safetensors OUT.safetensors [DIMS.json TOKENIZER_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file


def tiny_size(dims: dict) -> None:
    """Make LeRobot build π0 / π0.5 at the dims file's sizes (the fixtures' patches)."""
    from lerobot.policies import pi_gemma
    from lerobot.policies.pi0 import modeling_pi0
    from lerobot.policies.pi05 import modeling_pi05

    for module in (modeling_pi0, modeling_pi05):
        sizes = {
            "gemma_2b": module.GemmaConfig(**dims["paligemma"]),
            "gemma_300m": module.GemmaConfig(**dims["action_expert"]),
        }
        module.get_gemma_config = sizes.__getitem__
    paligemma_init = pi_gemma.PaliGemmaForConditionalGenerationWithPiGemma.__init__
    expert_init = pi_gemma.PiGemmaForCausalLM.__init__

    def paligemma(self, config):
        config._vocab_size = dims["vocab_size"]
        config.image_token_index = dims["image_token_id"]
        config.text_config.vocab_size = dims["vocab_size"]
        for key, value in dims["siglip"].items():
            setattr(config.vision_config, key, value)
        config.projection_dim = dims["projection_dim"]
        config.vision_config.projection_dim = dims["projection_dim"]
        paligemma_init(self, config)

    def expert(self, config, **kwargs):
        config.vocab_size = dims["vocab_size"]
        expert_init(self, config, **kwargs)

    pi_gemma.PaliGemmaForConditionalGenerationWithPiGemma.__init__ = paligemma
    pi_gemma.PiGemmaForCausalLM.__init__ = expert


def load_policy(folder: Path):
    from lerobot.policies.pi0.modeling_pi0 import PI0Policy
    from lerobot.policies.pi05.modeling_pi05 import PI05Policy
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    classes = {"pi0": PI0Policy, "pi05": PI05Policy, "smolvla": SmolVLAPolicy}
    kind = json.loads((folder / "config.json").read_text())["type"]
    if kind not in classes:
        raise SystemExit(f"{folder}: type {kind!r} is not one of {sorted(classes)}")
    cls = classes[kind]
    policy = cls.from_pretrained(str(folder), local_files_only=True).eval()
    loaded = policy.state_dict()
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        for key in f.keys():  # noqa: SIM118 (a safetensors handle)
            if key not in loaded or not torch.equal(loaded[key], f.get_tensor(key)):
                raise SystemExit(f"{folder}: LeRobot did not load {key} as stored")
    return policy


def main() -> None:
    folder, inputs_path, out_path = (Path(a) for a in sys.argv[1:4])
    dims = json.loads(Path(sys.argv[4]).read_text()) if len(sys.argv) > 4 else None
    tokenizer = sys.argv[5] if len(sys.argv) > 5 else None
    if dims is not None:
        tiny_size(dims)
    from lerobot.policies.factory import make_pre_post_processors

    policy = load_policy(folder)
    overrides = {"tokenizer_processor": {"tokenizer_name": tokenizer}} if tokenizer else {}
    pre, post = make_pre_post_processors(
        policy.config, pretrained_path=str(folder), preprocessor_overrides=overrides
    )
    inputs = load_file(str(inputs_path))
    with safe_open(str(inputs_path), "pt") as f:
        tasks = json.loads(f.metadata()["task"])
    batch = {k: v.float() / 255 for k, v in inputs.items() if k.startswith("observation.images.")}
    batch["observation.state"] = inputs["observation.state"]
    batch["task"] = tasks
    with torch.no_grad():
        chunk = policy.predict_action_chunk(pre(batch), noise=inputs["noise"])
        actions = post(chunk)
    save_file({"action_chunk": actions.contiguous()}, str(out_path))


if __name__ == "__main__":
    main()
