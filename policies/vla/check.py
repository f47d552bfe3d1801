"""Run a published VLA checkpoint on a file of inputs, for parity against upstream's outputs.

    python -m policies.vla.check PATH --inputs IN.safetensors --out OUT.safetensors \\
        [--dims tiny_dims.json] [--tokenizer DIR] [--asset-id ID] [--unnorm-key KEY] [--vlm DIR]

Tensor names are those of ``../shared/vla_reference/NOTES.md``.

π0 / π0.5 (openpi or LeRobot layout) and SmolVLA (LeRobot; ``--vlm DIR`` for its SmolVLM folder): uint8 ``observation.images.<camera>`` [B, 3, H, W],
``observation.state`` [B, state_dim], ``noise`` [B, chunk, max_action_dim] (x at t = 1) and the
instructions as a JSON list in the ``task`` metadata. Written: ``action_chunk`` (un-normalised, the
env's action dims), ``v_t1`` (the velocity at t = 1), ``actions_padded_normalized``, ``lang_tokens``
and ``lang_attention_mask`` (SmolVLA also ``state_padded_normalized``).

OpenVLA (``model_type: openvla``): uint8 ``image`` [H, W, 3] (or [B, H, W, 3]), the ``instruction``
metadata (a string or a JSON list) and ``unnorm_key`` (metadata or ``--unnorm-key``). Written:
``action_token_ids`` (greedy), ``actions`` (float64, un-normalised), ``pixel_values`` and
``generate_input_ids``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

IMAGE_PREFIX = "observation.images."


def read_inputs(path: Path) -> tuple[dict, dict[str, str]]:
    from safetensors import safe_open
    from safetensors.torch import load_file

    if not path.is_file():
        raise ValueError(f"--inputs {path}: no such file")
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata() or {}
    return load_file(str(path)), metadata


def run_openvla(args: argparse.Namespace) -> dict:
    import torch

    from policies.vla.openvla.loaded import load_openvla

    tensors, metadata = read_inputs(Path(args.inputs))
    if "image" not in tensors:
        raise ValueError(f"--inputs {args.inputs}: no 'image' tensor (uint8 [H, W, 3])")
    if "instruction" not in metadata:
        raise ValueError(f"--inputs {args.inputs}: no 'instruction' metadata")
    text = metadata["instruction"]
    instructions = json.loads(text) if text.startswith("[") else [text]
    images = tensors["image"] if tensors["image"].dim() == 4 else tensors["image"][None]
    policy = load_openvla(args.path, args.dims, args.tokenizer)
    batch = policy.inputs(images, instructions)
    out = policy.predict(batch, args.unnorm_key or metadata.get("unnorm_key"))
    ids = torch.as_tensor(out["action_token_ids"])
    return {
        "action_token_ids": ids[0] if len(instructions) == 1 else ids,
        "actions": torch.as_tensor(out["actions"][0] if len(instructions) == 1 else out["actions"]),
        "pixel_values": batch.pixel_values,
        "generate_input_ids": batch.tokens,
    }


def run_smolvla(args: argparse.Namespace, tensors: dict, tasks: list[str]) -> dict:
    from policies.vla.smolvla.loaded import load_smolvla

    images = {k.removeprefix(IMAGE_PREFIX): v for k, v in tensors.items() if k.startswith(IMAGE_PREFIX)}
    policy = load_smolvla(args.path, args.vlm or args.tokenizer)
    batch = policy.inputs(images, tensors["observation.state"], tasks)
    out = policy.sample(batch, tensors["noise"])
    out["lang_tokens"], out["lang_attention_mask"] = batch.tokens, batch.token_mask
    return out


def run(args: argparse.Namespace) -> dict:
    from policies.vla.openvla.checkpoint import is_openvla_folder
    from policies.vla.pi.loaded import load_pi
    from policies.vla.smolvla.loaded import is_smolvla_folder

    if is_openvla_folder(args.path):
        return run_openvla(args)
    tensors, metadata = read_inputs(Path(args.inputs))
    for name in ("observation.state", "noise"):
        if name not in tensors:
            raise ValueError(f"--inputs {args.inputs}: no {name!r} tensor")
    try:
        tasks = json.loads(metadata["task"])
    except (KeyError, json.JSONDecodeError):
        raise ValueError(
            f"--inputs {args.inputs}: no 'task' metadata (a JSON list of instructions)"
        ) from None
    if is_smolvla_folder(args.path):
        return run_smolvla(args, tensors, tasks)
    images = {k.removeprefix(IMAGE_PREFIX): v for k, v in tensors.items() if k.startswith(IMAGE_PREFIX)}
    policy = load_pi(args.path, args.dims, args.tokenizer, args.asset_id)
    batch = policy.inputs(images, tensors["observation.state"], tasks)
    out = policy.sample(batch, tensors["noise"])
    out["lang_tokens"], out["lang_attention_mask"] = batch.tokens, batch.token_mask
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m policies.vla.check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("path", help="the checkpoint folder (openpi, LeRobot or OpenVLA layout)")
    parser.add_argument("--inputs", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--dims", help="sizes where the config names variants the weights do not have")
    parser.add_argument("--tokenizer", help="the tokenizer folder, where the checkpoint has none")
    parser.add_argument("--asset-id", help="which assets/<id>/norm_stats.json (openpi layout)")
    parser.add_argument("--unnorm-key", help="OpenVLA: which norm_stats to un-normalise with")
    parser.add_argument("--vlm", help="SmolVLA: the SmolVLM folder, where the checkpoint names it by hub id")
    args = parser.parse_args(argv)
    try:
        out = run(args)
    except ValueError as exc:  # CheckpointError and bad inputs: one line, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from safetensors.torch import save_file

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous().cpu() for k, v in out.items()}, args.out)
    print(f"wrote {args.out}: " + ", ".join(f"{k} {list(v.shape)}" for k, v in sorted(out.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
