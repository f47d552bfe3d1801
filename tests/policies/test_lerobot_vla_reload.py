"""A π0 / π0.5 / SmolVLA finetuned here and exported in LeRobot's layout is what LeRobot's users
load: LeRobot 0.6.1's own classes (in its side venv, ``scripts/lerobot_venv.sh``) read the export
key for key, and on the reference inputs give the chunk our loader gives for the same folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors.torch import load_file  # noqa: E402

import sim_envs  # noqa: E402
from policies.vla import check  # noqa: E402
from tests.policies.test_openvla_export import PI_REFERENCE, export_finetuned  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SIDE_PYTHON = ROOT / ".venv-lerobot" / "bin" / "python"
PEER = Path(__file__).with_name("lerobot_vla_peer.py")
TOLERANCE = 1e-4  # the bound against upstream (float32)


@pytest.fixture(scope="module")
def env():
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=("front",), image_height=64, image_width=64)
    yield env
    env.close()


def lerobot_chunk(folder: Path, family: str, out: Path) -> torch.Tensor:
    reference = PI_REFERENCE / family
    args = [str(SIDE_PYTHON), str(PEER), str(folder), str(reference / "inputs.safetensors"), str(out)]
    if family != "smolvla":
        args += [str(reference / "tiny_dims.json"), str(reference / "paligemma_tokenizer")]
    # SmolVLA's config names its VLM folder relatively ("tiny_smolvlm"): upstream resolves it from the CWD.
    result = subprocess.run(args, cwd=reference, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return load_file(str(out))["action_chunk"]


def our_chunk(folder: Path, family: str, out: Path) -> torch.Tensor:
    reference = PI_REFERENCE / family
    args = [str(folder), "--inputs", str(reference / "inputs.safetensors"), "--out", str(out)]
    if family == "smolvla":
        args += ["--vlm", str(reference / "tiny_smolvlm")]
    else:
        args += [
            "--dims",
            str(reference / "tiny_dims.json"),
            "--tokenizer",
            str(reference / "paligemma_tokenizer"),
        ]
    assert check.main(args) == 0
    return load_file(str(out))["action_chunk"]


@pytest.mark.parametrize("family", ["pi0", "pi05", "smolvla"])
def test_lerobot_loads_our_export_and_acts_as_we_do(env, tmp_path, family):
    if not SIDE_PYTHON.exists():
        pytest.skip("no LeRobot side venv: bash scripts/lerobot_venv.sh (CI builds it)")
    out, _, _, _ = export_finetuned(env, tmp_path, family, "lerobot")
    theirs = lerobot_chunk(out, family, tmp_path / "lerobot.safetensors")
    ours = our_chunk(out, family, tmp_path / "ours.safetensors")
    diff = (theirs - ours).abs().max().item()
    print(f"{family}: max |LeRobot - ours| on the finetuned export = {diff:.2e}")
    assert diff < TOLERANCE
    # The export carries the finetune: LeRobot's chunk moved from the fixture's upstream chunk.
    upstream = load_file(str(PI_REFERENCE / family / "expected.safetensors"))["action_chunk"]
    assert (theirs - upstream).abs().max() > 1e-3
