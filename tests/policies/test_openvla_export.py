"""A finetuned OpenVLA goes back as upstream's folder: the fixture's key names and shapes, its
config fields, and the same actions when read again."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors import safe_open  # noqa: E402

import sim_envs  # noqa: E402
from policies import PolicyConfig, make_policy  # noqa: E402
from policies.config import VLAConfig  # noqa: E402
from policies.vla import export  # noqa: E402
from policies.vla.openvla.loaded import load_openvla  # noqa: E402
from tests.policies.test_openvla_policy import reference_policy  # noqa: E402
from tests.policies.test_vla_common import observations  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "vla_reference" / "openvla"
if not REFERENCE.is_dir():
    pytest.skip(f"no reference fixtures at {REFERENCE}", allow_module_level=True)


@pytest.fixture(scope="module")
def env():
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=("front",), image_height=64, image_width=64)
    yield env
    env.close()


def shapes(path: Path) -> dict[str, tuple[int, ...]]:
    with safe_open(str(path), "pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118


def finetune(policy, obs, steps: int = 3) -> None:
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    targets = torch.full((obs["state"].shape[0], policy.chunk_size, policy.action_dim), 0.3)
    for _ in range(steps):
        loss = policy.imitation_loss(obs, targets, torch.ones(targets.shape[:2]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_a_lora_finetuned_openvla_exports_as_upstreams_folder(env, tmp_path):
    policy = reference_policy(env, lora_rank=4)
    image = torch.randint(
        0, 255, (2, 224, 224, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    obs = {"state": torch.zeros(2, env.env_spec.state_dim), "images": {"base": image},
           "instruction": ["pick up the red cube", "open the top drawer"]}  # fmt: skip
    before = policy.act(obs, "greedy").samples
    finetune(policy, obs)
    after = policy.act(obs, "greedy").samples
    assert not torch.equal(before, after)  # the finetune moved the greedy tokens
    policy.save(tmp_path / "step_12" / "policy")
    assert export.main([str(tmp_path / "step_12" / "policy"), str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    assert shapes(out / "model.safetensors") == shapes(REFERENCE / "model" / "model.safetensors")
    config, upstream = (json.loads((f / "config.json").read_text()) for f in (out, REFERENCE / "model"))
    assert config == upstream
    reloaded = load_openvla(out, REFERENCE / "tiny_dims.json")
    batch = reloaded.inputs(image, obs["instruction"])
    tokens = reloaded.predict(batch)["action_token_ids"]
    assert tokens.tolist() == after[:, 0].long().tolist()


def test_a_tiny_oft_exports_and_reloads_as_a_checkpoint(env, tmp_path):
    torch.manual_seed(0)
    vla = VLAConfig(backbone="tiny:openvla-oft")
    policy = make_policy(
        env.env_spec,
        PolicyConfig(kind="vla", cameras=["front"], chunk_size=2, vla=vla, normalize_state=False),
    )
    obs = observations(env)
    finetune(policy, obs)
    policy.save(tmp_path / "policy")
    assert export.main([str(tmp_path / "policy"), str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("proprio_projector--*_checkpoint.pt")) == [
        "proprio_projector--0_checkpoint.pt"
    ]
    assert json.loads((out / "config.json").read_text())["model_type"] == "openvla"
    cfg = VLAConfig(checkpoint=str(out), dims=str(out / "tiny_dims.json"))
    again = make_policy(
        env.env_spec,
        PolicyConfig(kind="vla", cameras=["front"], chunk_size=2, vla=cfg, normalize_state=False),
    )
    assert again.parallel
    assert torch.equal(again.act(obs, "greedy").samples, policy.act(obs, "greedy").samples)


def test_export_refuses_what_it_cannot_write_in_one_line(env, tmp_path, capsys):
    torch.manual_seed(0)
    flow = VLAConfig(backbone="tiny:pi0", flow_steps=2)
    make_policy(env.env_spec, PolicyConfig(kind="vla", cameras=["front"], chunk_size=2, vla=flow)).save(
        tmp_path / "pi"
    )
    make_policy(env.env_spec, PolicyConfig(kind="mlp")).save(tmp_path / "mlp")
    assert export.main([str(tmp_path / "pi"), str(tmp_path / "out")]) == 2
    assert export.main([str(tmp_path / "mlp"), str(tmp_path / "out")]) == 2
    assert export.main([str(tmp_path / "nothing"), str(tmp_path / "out")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(line.startswith("error: ") for line in errors)
    assert "no upstream layout to export to" in errors[0] and "only the VLA families export" in errors[1]


PI_REFERENCE = REFERENCE.parent


def export_finetuned(env, tmp_path: Path, family: str, layout: str):
    """A π-family policy from the fixture's ``layout`` folder, finetuned with LoRA, saved and
    exported; returns the export, its source folder, the observations and the finetuned chunk."""
    from tests.policies.test_pi_policy import reference_spec

    folder = PI_REFERENCE / family
    tokenizer = folder / ("tiny_smolvlm" if family == "smolvla" else "paligemma_tokenizer")
    dims = None if family == "smolvla" else str(folder / "tiny_dims.json")
    vla = VLAConfig(checkpoint=str(folder / layout), dims=dims or "", tokenizer=str(tokenizer),
                    flow_steps=10, flow_noise_level=0.0, lora_rank=4)  # fmt: skip
    policy = make_policy(
        reference_spec(env), PolicyConfig(kind="vla", cameras=["base"], chunk_size=5, vla=vla)
    )
    generator = torch.Generator().manual_seed(0)
    obs = {"state": torch.randn(2, 8, generator=generator),
           "images": {"base": torch.randint(0, 255, (2, 64, 64, 3), dtype=torch.uint8, generator=generator)},
           "instruction": ["pick up the red cube", "open the drawer"]}  # fmt: skip
    before = policy.act(obs, "greedy").actions
    finetune(policy, obs)
    after = policy.act(obs, "greedy").actions
    assert not torch.allclose(before, after)  # the finetune moved the chunk
    policy.save(tmp_path / "policy")
    assert export.main([str(tmp_path / "policy"), str(tmp_path / "out")]) == 0
    return tmp_path / "out", folder / layout, obs, after


@pytest.mark.parametrize(
    ("family", "layout"), [("pi0", "openpi"), ("pi05", "lerobot"), ("smolvla", "lerobot")]
)
def test_a_lora_finetuned_flow_policy_exports_in_the_layout_it_came_in(env, tmp_path, family, layout):
    from policies.vla.pi.loaded import load_pi
    from policies.vla.smolvla.loaded import load_smolvla

    out, source, obs, after = export_finetuned(env, tmp_path, family, layout)
    folder = PI_REFERENCE / family
    tokenizer = folder / ("tiny_smolvlm" if family == "smolvla" else "paligemma_tokenizer")
    dims = None if family == "smolvla" else str(folder / "tiny_dims.json")
    assert shapes(out / "model.safetensors") == shapes(source / "model.safetensors")
    source_files = sorted(p.relative_to(source) for p in source.rglob("*") if p.is_file())
    assert sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file()) == source_files
    if family == "smolvla":
        reloaded = load_smolvla(out, tokenizer)
        reloaded.checkpoint = dataclasses.replace(reloaded.checkpoint, cameras=("base",))
        batch = reloaded.inputs(obs["images"], obs["state"], obs["instruction"])
    else:
        reloaded = load_pi(out, dims, tokenizer)
        slot = reloaded.checkpoint.cameras[0]
        batch = reloaded.inputs({slot: obs["images"]["base"]}, obs["state"], obs["instruction"])
    chunk_out = reloaded.sample(batch, torch.zeros(2, 5, 32))["action_chunk"]
    torch.testing.assert_close(chunk_out.clamp(-10.0, 10.0), after, atol=1e-4, rtol=0)
