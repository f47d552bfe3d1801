"""SmolVLA as LeRobot writes it: our loader and sampler give LeRobot 0.6.1's chunk on the reference
inputs (../shared/vla_reference/smolvla, NOTES.md); the real smolvla_base shapes build on the meta
device; bad folders fail in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from policies.vla import check  # noqa: E402
from policies.vla.smolvla.loaded import load_smolvla  # noqa: E402
from policies.vla.smolvla.model import SmolVLADims, build_smolvla  # noqa: E402
from policies.vla.weights import CheckpointError  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "vla_reference" / "smolvla"
if not REFERENCE.is_dir():
    pytest.skip(f"no reference fixtures at {REFERENCE}", allow_module_level=True)
TOLERANCE = 1e-5


def test_the_chunk_matches_upstream(tmp_path, monkeypatch):
    monkeypatch.chdir(REFERENCE)  # config.json names its VLM "tiny_smolvlm", relative to the CWD as upstream
    out = tmp_path / "out.safetensors"
    args = ["lerobot", "--inputs", "inputs.safetensors", "--out", str(out)]
    assert check.main(args) == 0
    ours, expected = load_file(str(out)), load_file(str(REFERENCE / "expected.safetensors"))
    assert torch.equal(ours["lang_tokens"], expected["lang_tokens"])
    assert torch.equal(ours["lang_attention_mask"], expected["lang_attention_mask"])
    for name in ("state_padded_normalized", "v_t1", "actions_padded_normalized", "action_chunk"):
        diff = (ours[name] - expected[name]).abs().max().item()
        print(f"smolvla {name}: max |ours - upstream| = {diff:.2e}")
        assert diff < TOLERANCE, (name, diff)


def test_cross_attention_layers_read_the_prefix_through_the_experts_own_projections():
    policy = load_smolvla(REFERENCE / "lerobot", REFERENCE / "tiny_smolvlm")
    expert = policy.model.vlm_with_expert
    vlm_kv = 2 * 16  # the VLM's key / value width
    assert [expert.is_self_attention(i) for i in range(4)] == [True, False, True, False]
    assert expert.lm_expert.layers[1].self_attn.k_proj.in_features == vlm_kv
    assert expert.lm_expert.layers[0].self_attn.k_proj.in_features == 48  # joint layers: its own width
    assert len(expert.text_model.layers) == 4  # cut from the config's 6, as num_vlm_layers says


def test_weights_load_straight_into_bfloat16():
    policy = load_smolvla(REFERENCE / "lerobot", REFERENCE / "tiny_smolvlm", dtype=torch.bfloat16)
    assert {p.dtype for p in policy.model.parameters()} == {torch.bfloat16}


def test_real_smolvla_base_shapes_on_the_meta_device():
    """smolvla_base: SmolVLM2-500M (SigLIP 768 x 12 at 512 px, a 960-wide Llama) cut to 16 layers,
    a 720-wide expert; LeRobot's names and the parameter count (~450 M)."""
    vlm = {
        "model_type": "smolvlm", "scale_factor": 4, "image_token_id": 49190,
        "text_config": {"model_type": "llama", "hidden_size": 960, "intermediate_size": 2560, "num_hidden_layers": 32,
                        "num_attention_heads": 15, "num_key_value_heads": 5, "head_dim": 64, "vocab_size": 49280},
        "vision_config": {"model_type": "smolvlm_vision", "hidden_size": 768, "intermediate_size": 3072,
                          "num_hidden_layers": 12, "num_attention_heads": 12, "patch_size": 16, "image_size": 512},
    }  # fmt: skip
    model = build_smolvla(SmolVLADims(vlm_config=vlm, num_vlm_layers=16, chunk_size=50))
    params = dict(model.named_parameters())
    assert all(p.is_meta for p in params.values())
    total = sum(p.numel() for p in params.values())
    print(f"smolvla_base: {total / 1e6:.1f} M parameters")
    assert 420e6 < total < 480e6
    expert = "vlm_with_expert.lm_expert.layers."
    assert params[expert + "0.self_attn.q_proj.weight"].shape == (960, 720)
    assert params[expert + "1.self_attn.k_proj.weight"].shape == (320, 320)
    assert params[expert + "0.mlp.gate_proj.weight"].shape == (2048, 720)
    assert params["state_proj.weight"].shape == (960, 32)
    with safe_open(str(REFERENCE / "lerobot" / "model.safetensors"), "pt") as f:
        stored = {k.removeprefix("model.") for k in f.keys()}  # noqa: SIM118
    tiny = build_smolvla(SmolVLADims(vlm_config=json.loads((REFERENCE / "tiny_smolvlm" / "config.json").read_text()),
                                     num_vlm_layers=4, chunk_size=5))  # fmt: skip
    assert set(dict(tiny.named_parameters())) == stored


def test_bad_folders_say_what_is_wrong_in_one_line(tmp_path):
    folder = tmp_path / "lerobot"
    shutil.copytree(REFERENCE / "lerobot", folder)

    def error(vlm=REFERENCE / "tiny_smolvlm") -> str:
        with pytest.raises(CheckpointError) as info:
            load_smolvla(folder, vlm)
        assert "\n" not in str(info.value)
        return str(info.value)

    assert "its VLM 'tiny_smolvlm' is not a local folder" in error(vlm=None)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "attention_mode": "self_attn"}))
    assert "only cross_attn is supported" in error()
    (folder / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(folder / "model.safetensors"))
    tensors.pop("model.state_proj.bias")
    save_file(tensors, str(folder / "model.safetensors"))
    assert "missing model.state_proj.bias" in error()
