"""OpenVLA-OFT as OFT's ``predict_action`` does it: zeroed placeholders, the STOP token, the proprio
token, bidirectional attention, the L1 head read from the prompt's last position on; OFT's
component pickles loaded without running code. OFT publishes no tiny reference, so the heads here
are random ones written in OFT's own file format (``torch.save`` of a DDP state dict) beside the
upstream-written OpenVLA fixture."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors.torch import load_file  # noqa: E402

from policies.vla.openvla.loaded import load_openvla  # noqa: E402
from policies.vla.openvla.oft import (  # noqa: E402
    STOP_TOKEN,
    L1RegressionActionHead,
    ProprioProjector,
    parallel_pass,
    unnormalize_oft,
)
from policies.vla.weights import CheckpointError, empty_parameters  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "vla_reference" / "openvla"
if not REFERENCE.is_dir():
    pytest.skip(f"no reference fixtures at {REFERENCE}", allow_module_level=True)
DIMS = REFERENCE / "tiny_dims.json"
TASK = "Pick up the red cube and put it on the plate"


def oft_folder(tmp_path: Path, proprio: bool = True) -> Path:
    folder = tmp_path / "oft"
    shutil.copytree(REFERENCE / "model", folder)
    torch.manual_seed(0)
    head = L1RegressionActionHead(64, 7)
    torch.save(
        {f"module.{k}": v for k, v in head.state_dict().items()}, folder / "action_head--150000_checkpoint.pt"
    )
    if proprio:
        torch.save(ProprioProjector(64, 7).state_dict(), folder / "proprio_projector--150000_checkpoint.pt")
    stats = json.loads((folder / "config.json").read_text())["norm_stats"]
    stats["fixture_robot"]["proprio"] = {"q01": [-1.0] * 7, "q99": [1.0] * 7}
    (folder / "dataset_statistics.json").write_text(json.dumps(stats))
    return folder


def image() -> torch.Tensor:
    return load_file(str(REFERENCE / "inputs.safetensors"))["image"][None]


def test_the_chunk_is_the_l1_head_on_the_hidden_states_from_the_prompts_last_position(tmp_path):
    policy = load_openvla(oft_folder(tmp_path), DIMS)
    state = np.linspace(-0.5, 0.5, 7)[None]
    batch = policy.inputs([image(), image().flip(1)], [TASK], state)
    assert batch.pixel_values.shape == (1, 12, 224, 224)  # two images, each DINOv2 + SigLIP
    out = policy.predict(batch, chunk=8)
    assert out["actions"].shape == (1, 8, 7)
    # By hand: [BOS, patches x 2, proprio, prompt[1:], 56 zeros, STOP], attention over everything.
    model = policy.model
    with torch.no_grad():
        proprio = policy.heads.proprio_projector(batch.proprio)[:, None]
        patches = torch.cat([model.image_patches(batch.pixel_values), proprio], dim=1)
        text = model.language_model.get_input_embeddings()(batch.tokens)
        stop = model.language_model.get_input_embeddings()(torch.tensor([[STOP_TOKEN]]))
        embeds = torch.cat([text[:, :1], patches, text[:, 1:], torch.zeros(1, 56, 64), stop], dim=1)
        hidden = model.language_model(inputs_embeds=embeds, attention_mask=torch.ones(1, 1, *embeds.shape[1:2] * 2).bool(),
                                      output_hidden_states=True).hidden_states[-1]  # fmt: skip
        start = 1 + patches.shape[1] + batch.tokens.shape[1] - 2  # the position of 29871
        normalized = policy.heads.action_head(hidden[:, start : start + 56]).double().numpy()
    assert batch.tokens[0, -1] == 29871
    stats = policy.action_stats(None)
    np.testing.assert_allclose(out["actions"], unnormalize_oft(normalized, stats), atol=1e-6)
    # The gripper dim (mask False) passes through un-normalised.
    np.testing.assert_allclose(out["actions"][..., 6], out["normalized_actions"][..., 6])


def test_attention_is_bidirectional_and_the_placeholders_carry_nothing(tmp_path):
    policy = load_openvla(oft_folder(tmp_path), DIMS)
    batch = policy.inputs([image()], [TASK], np.zeros((1, 7)))
    prompt = policy.prompt(batch)
    with torch.no_grad():
        _, hidden, _ = parallel_pass(policy.model, prompt, 14)
        embed = policy.model.language_model.get_input_embeddings()
        embed.weight[STOP_TOKEN] += 1.0  # the STOP token is last: causally, nothing before it could see it
        _, moved, _ = parallel_pass(policy.model, prompt, 14)
    assert (moved[:, 0] - hidden[:, 0]).abs().max() > 1e-4


def test_a_batch_gives_each_row_what_it_gets_alone(tmp_path):
    policy = load_openvla(oft_folder(tmp_path), DIMS)
    texts = [TASK, "open the top drawer and put the bowl inside of it"]
    images = torch.cat([image(), image().flip(2)])
    states = np.array([np.linspace(-1, 1, 7), np.zeros(7)])
    together = policy.predict(policy.inputs([images], texts, states), chunk=4)["actions"]
    for row in range(2):
        alone = policy.predict(
            policy.inputs([images[row : row + 1]], texts[row : row + 1], states[row : row + 1]), chunk=4
        )
        np.testing.assert_allclose(alone["actions"][0], together[row], atol=1e-5)


def test_the_component_pickles_never_run_code_and_must_hold_tensors(tmp_path):
    folder = oft_folder(tmp_path)
    head = folder / "action_head--150000_checkpoint.pt"

    class Payload:
        def __reduce__(self):
            return (print, ("this ran",))

    head.write_bytes(pickle.dumps({"model.fc1.weight": Payload()}))
    with pytest.raises(
        CheckpointError, match=r"action_head--150000_checkpoint\.pt: not a state dict of tensors"
    ) as info:
        load_openvla(folder, DIMS)
    assert "\n" not in str(info.value)
    torch.save({"model.fc1.weight": torch.zeros(1), "step": 3}, head)
    with pytest.raises(CheckpointError, match="holds something other than tensors"):
        load_openvla(folder, DIMS)
    head.unlink()
    with pytest.raises(CheckpointError, match=r"no action_head--\*_checkpoint\.pt"):
        load_openvla(folder, DIMS)


def test_a_state_too_wide_and_a_missing_state_are_refused(tmp_path):
    policy = load_openvla(oft_folder(tmp_path), DIMS)
    with pytest.raises(ValueError, match="give the state too"):
        policy.inputs([image()], [TASK])
    with pytest.raises(CheckpointError, match="no norm_stats for unnorm_key 'libero'"):
        policy.predict(policy.inputs([image()], [TASK], np.zeros((1, 7))), unnorm_key="libero")


def test_real_size_oft_libero_heads_on_the_meta_device():
    """openvla-7b-oft-finetuned-libero-*: the L1 head reads 7 x 4096 per step; proprio is 8-dim."""
    with empty_parameters():
        head, proprio = L1RegressionActionHead(4096, 7), ProprioProjector(4096, 8)
    shapes = {
        k: tuple(v.shape)
        for k, v in {**head.state_dict(), **{f"p.{k}": v for k, v in proprio.state_dict().items()}}.items()
    }
    assert shapes["model.fc1.weight"] == (4096, 28672) and shapes["model.fc2.weight"] == (7, 4096)
    assert shapes["model.mlp_resnet_blocks.1.ffn.1.weight"] == (4096, 4096)
    assert shapes["p.fc1.weight"] == (4096, 8)
    total = sum(p.numel() for p in head.parameters())
    print(f"OFT LIBERO L1 head: {total / 1e6:.1f} M parameters")
    assert 150e6 < total < 155e6
