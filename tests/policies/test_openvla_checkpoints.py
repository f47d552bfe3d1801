"""OpenVLA checkpoints as upstream writes them: our loader gives upstream's action tokens and actions
on the reference input (written by upstream's own ``OpenVLAForActionPrediction``, see
../shared/vla_reference/NOTES.md); the bins, the prompt and the un-normalisation are pinned to
upstream's spec; bad folders fail in one line."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from policies.vla import check  # noqa: E402
from policies.vla.openvla.checkpoint import ActionStats, read_checkpoint  # noqa: E402
from policies.vla.openvla.inputs import (  # noqa: E402
    normalized_to_tokens,
    tokenize,
    tokens_to_normalized,
    unnormalize,
)
from policies.vla.openvla.loaded import load_openvla, load_tokenizer  # noqa: E402
from policies.vla.openvla.model import build_model  # noqa: E402
from policies.vla.weights import CheckpointError  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "vla_reference" / "openvla"
if not REFERENCE.is_dir():
    pytest.skip(f"no reference fixtures at {REFERENCE}", allow_module_level=True)
MODEL, DIMS = REFERENCE / "model", REFERENCE / "tiny_dims.json"
INSTRUCTION = "pick up the red cube and put it on the plate"


def run_check(out: Path, *extra: str) -> int:
    return check.main(
        [str(MODEL), "--inputs", str(REFERENCE / "inputs.safetensors"), "--out", str(out), *extra]
    )


def test_the_tokens_and_actions_match_upstream(tmp_path):
    assert run_check(tmp_path / "out.safetensors", "--dims", str(DIMS)) == 0
    ours = load_file(str(tmp_path / "out.safetensors"))
    expected = load_file(str(REFERENCE / "expected.safetensors"))
    assert torch.equal(ours["action_token_ids"], expected["action_token_ids"])
    assert torch.equal(ours["generate_input_ids"], expected["generate_input_ids"])
    pixels = (ours["pixel_values"] - expected["pixel_values"]).abs().max().item()
    actions = (ours["actions"] - expected["actions"]).abs().max().item()
    print(f"openvla: tokens identical, pixel_values {pixels:.2e}, actions {actions:.2e}")
    assert pixels < 1e-6 and actions < 1e-5


def test_a_batch_of_different_prompts_gives_each_row_its_own_answer():
    """Left padding and real-token positions: every row of a batch gets what it gets alone."""
    policy = load_openvla(MODEL, DIMS)
    image = load_file(str(REFERENCE / "inputs.safetensors"))["image"]
    texts = [INSTRUCTION, "open the top drawer and put the bowl inside of it", "stack the cups"]
    images = torch.stack([image, image.flip(0), image.flip(1)])
    together = policy.predict(policy.inputs(images, texts))
    batch = policy.inputs(images, texts)
    assert batch.token_mask[:, 0].tolist().count(0) >= 1  # the rows really are padded differently
    for row, text in enumerate(texts):
        alone = policy.predict(policy.inputs(images[row : row + 1], [text]))
        assert np.array_equal(alone["action_token_ids"][0], together["action_token_ids"][row])
        assert np.allclose(alone["actions"][0], together["actions"][row], atol=1e-6)


def test_the_bins_are_upstreams():
    centers = tokens_to_normalized(np.array([31999, 31744, 32000, 31000]), vocab_size=32000, n_bins=256)
    assert np.allclose(centers, [-0.99608, 0.99608, -0.99608, 0.99608], atol=1e-5)
    assert np.all(np.diff(tokens_to_normalized(np.arange(31744, 32000), 32000, 256)) <= 0)  # decreasing
    # The action tokenizer's inverse: every bin centre comes back to its own token.
    for token in range(31745, 32000):
        value = tokens_to_normalized(np.array([token]), 32000, 256)
        assert normalized_to_tokens(value, 32000, 256)[0] == token
    assert normalized_to_tokens(np.array([-1.0, 1.0, 5.0]), 32000, 256).tolist() == [31999, 31744, 31744]


def test_unnormalisation_uses_q01_q99_and_passes_masked_dims_through():
    stats = ActionStats(
        q01=np.array([-2.0, 0.0, 0.0]), q99=np.array([2.0, 1.0, 1.0]), mask=np.array([True, True, False])
    )
    out = unnormalize(np.array([0.5, -1.0, 0.25]), stats)
    assert np.allclose(out, [1.0, 0.0, 0.25])
    with pytest.raises(ValueError, match="3 action dims, the checkpoint's statistics have 2"):
        unnormalize(np.zeros(3), ActionStats(np.zeros(2), np.ones(2), np.ones(2, bool)))


def test_the_prompt_ids():
    tokenizer = load_tokenizer(MODEL)
    ids, mask = tokenize(tokenizer, [INSTRUCTION])
    upstream = load_file(str(REFERENCE / "expected.safetensors"))["generate_input_ids"]
    assert ids.tolist() == upstream.tolist() and mask.all()
    assert ids[0, 0] == 1 and ids[0, -1] == 29871  # BOS first, Llama-2's "▁" appended


def test_weights_load_straight_into_bfloat16():
    policy = load_openvla(MODEL, DIMS, dtype=torch.bfloat16)
    assert {p.dtype for p in policy.model.parameters()} == {torch.bfloat16}
    image = load_file(str(REFERENCE / "inputs.safetensors"))["image"]
    out = policy.predict(policy.inputs(image[None], [INSTRUCTION]))
    assert np.all((out["action_token_ids"] >= 31744) & (out["action_token_ids"] <= 31999))


def real_config(tmp_path: Path) -> Path:
    """openvla-7b's config.json: the fixture's with Llama-2 7B's (default) text config."""
    config = json.loads((MODEL / "config.json").read_text())
    config["text_config"] = {"model_type": "llama", "pad_token_id": 32000, "vocab_size": 32064}
    folder = tmp_path / "openvla-7b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def layer_pattern(name: str) -> str:
    return re.sub(r"\.(layers|blocks)\.\d+\.", r".\1.N.", name)


def test_real_size_shapes_on_the_meta_device(tmp_path):
    """openvla-7b (DINOv2 ViT-L/14 + SigLIP so400m/14 at 224 px, Llama-2 7B) builds without memory,
    under exactly the names the checkpoints carry."""
    model = build_model(read_checkpoint(real_config(tmp_path)))
    params = dict(model.named_parameters())
    assert all(p.is_meta for p in params.values())
    total = sum(p.numel() for p in params.values())
    print(f"openvla-7b: {total / 1e9:.3f} B parameters")
    assert 7.4e9 < total < 7.7e9
    assert params["projector.fc1.weight"].shape == (8704, 2176)
    assert params["projector.fc3.weight"].shape == (4096, 4096)
    assert params["vision_backbone.featurizer.reg_token"].shape == (1, 4, 1024)
    assert params["vision_backbone.featurizer.pos_embed"].shape == (1, 256, 1024)
    assert params["vision_backbone.fused_featurizer.blocks.26.mlp.fc1.weight"].shape == (4304, 1152)
    assert params["language_model.model.embed_tokens.weight"].shape == (32064, 4096)
    with safe_open(str(MODEL / "model.safetensors"), "pt") as f:
        stored = {layer_pattern(k) for k in f.keys()}  # noqa: SIM118
    assert {layer_pattern(k) for k in params} == stored


def copy_model(tmp_path: Path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(MODEL, target)
    return target


def load_error(folder: Path, dims: Path | None = DIMS) -> str:
    with pytest.raises(CheckpointError) as info:
        load_openvla(folder, dims)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_bad_folders_say_what_is_wrong_in_one_line(tmp_path):
    folder = copy_model(tmp_path)
    assert "pass a dims file" in load_error(folder, dims=None)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "llava"}))
    assert "model_type 'llava' is not OpenVLA" in load_error(folder)
    (folder / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(folder / "model.safetensors"))
    tensors.pop("projector.fc2.bias")
    tensors["vision_backbone.extra.weight"] = torch.zeros(1)
    save_file(tensors, str(folder / "model.safetensors"))
    assert "unexpected key vision_backbone.extra.weight" in load_error(folder)
    del tensors["vision_backbone.extra.weight"]
    save_file(tensors, str(folder / "model.safetensors"))
    assert "missing projector.fc2.bias" in load_error(folder)


def test_the_unnorm_key_is_checked_and_listed(tmp_path):
    policy = load_openvla(MODEL, DIMS)
    with pytest.raises(
        CheckpointError, match=r"no norm_stats for unnorm_key 'bridge'; keys: \['fixture_robot'\]"
    ):
        policy.checkpoint.action_stats("bridge")
    folder = copy_model(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["norm_stats"]["second_robot"] = config["norm_stats"]["fixture_robot"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"trained on 2 datasets, name one with policy\.vla\.unnorm_key"
    ):
        read_checkpoint(folder, DIMS).action_stats(None)


def test_the_cli_says_bad_input_in_one_line(tmp_path, capsys):
    assert run_check(tmp_path / "o.safetensors", "--dims", str(DIMS), "--unnorm-key", "bridge") == 2
    assert run_check(tmp_path / "o.safetensors") == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and all(line.startswith("error: ") for line in errors)
    assert "unnorm_key 'bridge'" in errors[0] and "pass a dims file" in errors[1]
