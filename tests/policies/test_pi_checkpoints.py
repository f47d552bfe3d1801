"""π0 / π0.5 checkpoints as upstream writes them (openpi and LeRobot layouts): the chunk our
loader and sampler give on the reference inputs equals upstream's (written by LeRobot 0.6.1, see
../shared/vla_reference/NOTES.md); bad folders and inputs fail in one line."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from policies.vla import check  # noqa: E402
from policies.vla.pi.checkpoint import CheckpointError, read_checkpoint  # noqa: E402
from policies.vla.pi.dims import PiDims  # noqa: E402
from policies.vla.pi.loaded import load_pi  # noqa: E402
from policies.vla.pi.models import Pi0Flow, Pi05Flow, euler_sample  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "vla_reference"
if not REFERENCE.is_dir():
    pytest.skip(f"no reference fixtures at {REFERENCE}", allow_module_level=True)
TOLERANCE = 1e-4  # the issue's bound (float32); measured: π0 1.4e-5 (transformers' own PI0), π0.5 2.4e-7


def family_dir(family: str) -> Path:
    return REFERENCE / family


def run_check(family: str, layout: str, out: Path) -> dict:
    folder = family_dir(family)
    code = check.main(
        [
            str(folder / layout),
            "--inputs", str(folder / "inputs.safetensors"),
            "--out", str(out),
            "--dims", str(folder / "tiny_dims.json"),
            "--tokenizer", str(folder / "paligemma_tokenizer"),
        ]
    )  # fmt: skip
    assert code == 0
    return load_file(str(out))


@pytest.mark.parametrize("layout", ["lerobot", "openpi"])
@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_the_chunk_matches_upstream(family, layout, tmp_path):
    ours = run_check(family, layout, tmp_path / "out.safetensors")
    expected = load_file(str(family_dir(family) / "expected.safetensors"))
    assert torch.equal(ours["lang_tokens"], expected["lang_tokens"])
    assert torch.equal(ours["lang_attention_mask"], expected["lang_attention_mask"])
    for name in ("action_chunk", "actions_padded_normalized", "v_t1"):
        diff = (ours[name] - expected[name]).abs().max().item()
        print(f"{family}/{layout} {name}: max |ours - upstream| = {diff:.2e}")
        assert diff < TOLERANCE, (name, diff)
    # The chunk is not trivially near upstream's: it moved far from the noise it started at.
    assert (
        expected["actions_padded_normalized"]
        - load_file(str(family_dir(family) / "inputs.safetensors"))["noise"]
    ).abs().max() > 0.1


def reference_batch(family: str):
    folder = family_dir(family)
    inputs = load_file(str(folder / "inputs.safetensors"))
    with safe_open(str(folder / "inputs.safetensors"), "pt") as f:
        meta = f.metadata()
    images = {
        k.removeprefix("observation.images."): v
        for k, v in inputs.items()
        if k.startswith("observation.images.")
    }
    return inputs, images, json.loads(meta["task"])


def test_our_pi0_path_is_transformers_own_sampler():
    """Our prefix / velocity / Euler loop over transformers' PI0 gives what its ``sample_actions`` gives."""
    folder = family_dir("pi0")
    policy = load_pi(folder / "lerobot", folder / "tiny_dims.json", folder / "paligemma_tokenizer")
    inputs, images, tasks = reference_batch("pi0")
    batch = policy.inputs(images, inputs["observation.state"], tasks)
    ours = policy.sample(batch, inputs["noise"])["actions_padded_normalized"]
    pi0 = policy.model.pi0
    per_image = policy.checkpoint.dims.vision.tokens_per_image
    cameras = batch.pixel_values.shape[1]
    ids = torch.cat(
        [torch.full((2, cameras * per_image), pi0.config.vlm_config.image_token_id), batch.tokens], 1
    )
    mask = torch.cat([torch.ones(2, cameras * per_image, dtype=torch.long), batch.token_mask.long()], 1)
    with torch.no_grad():
        theirs = pi0.sample_actions(
            state=batch.state, input_ids=ids, pixel_values=batch.pixel_values, noise=inputs["noise"],
            attention_mask=mask, pixel_attention_mask=batch.camera_mask,
        )  # fmt: skip
    assert (ours - theirs).abs().max().item() < 1e-6


def test_weights_load_straight_into_bfloat16():
    folder = family_dir("pi05")
    policy = load_pi(
        folder / "openpi", folder / "tiny_dims.json", folder / "paligemma_tokenizer", dtype=torch.bfloat16
    )
    assert {p.dtype for p in policy.model.parameters()} == {torch.bfloat16}
    inputs, images, tasks = reference_batch("pi05")
    out = policy.sample(policy.inputs(images, inputs["observation.state"], tasks), inputs["noise"].bfloat16())
    expected = load_file(str(folder / "expected.safetensors"))["action_chunk"]
    assert torch.isfinite(out["action_chunk"]).all()
    assert (out["action_chunk"] - expected).abs().max() < 0.5  # bf16: near, not equal


def layer_pattern(name: str) -> str:
    return re.sub(r"\.layers\.\d+\.", ".layers.N.", name)


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_real_size_shapes_on_the_meta_device(family):
    """The published variants (PaliGemma 3B: SigLIP so400m/14 + Gemma 2B; Gemma 300M expert) build
    without memory, and their parameter names are exactly the names the checkpoints carry."""
    model = (Pi0Flow if family == "pi0" else Pi05Flow)(PiDims(family=family))
    params = dict(model.named_parameters())
    assert all(p.is_meta for p in params.values())
    total = sum(p.numel() for p in params.values())
    print(f"{family}: {total / 1e9:.3f} B parameters")
    assert 3.2e9 < total < 3.7e9
    names = model.state_dict_names()
    by_theirs = {theirs: params[ours].shape for ours, theirs in names.items()}
    assert by_theirs["paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"] == (
        257_152,
        2048,
    )
    assert by_theirs["paligemma_with_expert.gemma_expert.model.layers.17.self_attn.q_proj.weight"] == (
        2048,
        1024,
    )
    vision = "paligemma_with_expert.paligemma.model.vision_tower.vision_model."
    assert by_theirs[vision + "encoder.layers.26.mlp.fc1.weight"] == (4304, 1152)
    with safe_open(str(family_dir(family) / "openpi" / "model.safetensors"), "pt") as f:
        stored = {layer_pattern(k) for k in f.keys()}  # noqa: SIM118
    ours = {layer_pattern(k) for k in names.values()} | {"paligemma_with_expert.paligemma.lm_head.weight"}
    if family == "pi05":
        ours.add("paligemma_with_expert.gemma_expert.lm_head.weight")
    ours.discard("paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight")  # openpi ties it
    assert ours == stored


def copy_folder(family: str, layout: str, tmp_path: Path) -> Path:
    target = tmp_path / layout
    shutil.copytree(family_dir(family) / layout, target)
    return target


def load_error(folder: Path, family: str, **kwargs) -> str:
    with pytest.raises(CheckpointError) as info:
        load_pi(
            folder,
            family_dir(family) / "tiny_dims.json",
            family_dir(family) / "paligemma_tokenizer",
            **kwargs,
        )
    message = str(info.value)
    assert "\n" not in message
    return message


def test_an_unknown_folder_names_the_layouts(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert "known: ['openpi', 'lerobot']" in load_error(tmp_path, "pi0")
    assert "no config.json" in load_error(tmp_path / "nothing", "pi0")


def test_a_pi05_folder_whose_config_says_pi0(tmp_path):
    folder = copy_folder("pi05", "lerobot", tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "type": "pi0"}))
    assert "says 'pi0' but the weights are 'pi05'" in load_error(folder, "pi05")


def test_weights_that_do_not_fit_the_config_say_to_pass_dims():
    folder = family_dir("pi0") / "openpi"
    with pytest.raises(CheckpointError, match="pass their dims with --dims"):
        load_pi(folder, None, family_dir("pi0") / "paligemma_tokenizer")


def test_a_missing_and_an_unexpected_key_are_named(tmp_path):
    folder = copy_folder("pi0", "openpi", tmp_path)
    weights = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if k != "state_proj.bias"}, str(folder / "model.safetensors"))
    assert "missing state_proj.bias" in load_error(folder, "pi0")
    save_file({**weights, "extra.head.weight": torch.zeros(2)}, str(folder / "model.safetensors"))
    assert "unexpected key extra.head.weight" in load_error(folder, "pi0")


def test_missing_norm_stats_and_tokenizer(tmp_path):
    folder = copy_folder("pi0", "openpi", tmp_path)
    with pytest.raises(CheckpointError, match="pass the PaliGemma tokenizer's folder with --tokenizer"):
        load_pi(folder, family_dir("pi0") / "tiny_dims.json")
    shutil.copytree(folder / "assets" / "fixture_robot", folder / "assets" / "other_robot")
    assert "name one with policy.vla.asset_id; found: ['fixture_robot', 'other_robot']" in load_error(
        folder, "pi0"
    )
    assert read_checkpoint(folder, asset_id="other_robot").state_dim == 8
    shutil.rmtree(folder / "assets")
    assert "norm_stats.json" in load_error(folder, "pi0")


def test_a_state_too_wide_and_a_camera_without_a_slot():
    folder = family_dir("pi0")
    policy = load_pi(folder / "openpi", folder / "tiny_dims.json", folder / "paligemma_tokenizer")
    inputs, images, tasks = reference_batch("pi0")
    with pytest.raises(CheckpointError, match="wider than the checkpoint's max_state_dim=32"):
        policy.inputs(images, torch.zeros(2, 40), tasks)
    with pytest.raises(
        CheckpointError,
        match=r"camera 'top'.*slots: \['base_0_rgb', 'left_wrist_0_rgb', 'right_wrist_0_rgb'\]",
    ):
        policy.inputs({**images, "top": images["base_0_rgb"]}, inputs["observation.state"], tasks)


def test_an_absent_openpi_camera_is_masked_not_seen():
    """openpi keeps all three slots: the right wrist the fixture lacks is black and masked, so it
    changes nothing; showing the model a real image there instead does."""
    folder = family_dir("pi0")
    policy = load_pi(folder / "openpi", folder / "tiny_dims.json", folder / "paligemma_tokenizer")
    inputs, images, tasks = reference_batch("pi0")
    batch = policy.inputs(images, inputs["observation.state"], tasks)
    assert batch.camera_mask.tolist() == [[True, True, False]] * 2
    state = batch.state
    masked = euler_sample(policy.model, policy.prefix(batch), state, inputs["noise"], 10)[0]
    seen = policy.inputs(
        {**images, "right_wrist_0_rgb": images["base_0_rgb"]}, inputs["observation.state"], tasks
    )
    with torch.no_grad():
        shown = euler_sample(policy.model, policy.prefix(seen), state, inputs["noise"], 10)[0]
    expected = load_file(str(folder / "expected.safetensors"))["actions_padded_normalized"]
    assert (masked - expected).abs().max() < TOLERANCE
    assert (shown - expected).abs().max() > 10 * TOLERANCE


def test_the_cli_says_bad_input_in_one_line(tmp_path, capsys):
    folder = family_dir("pi05")
    code = check.main(
        [str(folder / "openpi"), "--inputs", str(tmp_path / "none.safetensors"), "--out", str(tmp_path / "o")]
    )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --inputs") and "\n" not in err
