"""``rlinf-trainer serve`` in ``dagger`` mode on the MuJoCo twin behind a real agent: the twin's
scripted expert is "the human" (gated: HG-DAgger; advise: DAgger)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from policies import make_policy
from policies.factory import load_policy
from robot_agent.drivers import make_driver
from robot_agent.teleop import make_teleop
from tests.integration.link_harness import start_agent
from trainer.configs.errors import ConfigError
from trainer.server.config import load_serve_config
from trainer.server.dagger import dagger

pytestmark = pytest.mark.slow
TWIN = {"task": "reach", "max_episode_steps": 15, "cameras": ["front"], "image_size": 64, "control_hz": 10.0,
        "randomization": "none"}  # fmt: skip
# HG-DAgger fits a CNN that reads the twin's front camera (JPEG over the link, mp4 in the dataset)
# and plays 2-step chunks; DAgger fits a state MLP.
CNN = {"kind": "cnn", "cameras": ["front"], "cnn_channels": [8, 16, 16], "chunk_size": 2}


def initial_policy(tmp_path: Path, **policy: object) -> Path:
    driver = make_driver("sim-twin", TWIN)
    torch.manual_seed(0)
    policy = make_policy(driver.spec, {"hidden_sizes": [32], "value_head": False, **policy})
    driver.close()
    policy.save(tmp_path / "start")
    return tmp_path / "start"


def config_for(tmp_path: Path, *overrides: str):
    return load_serve_config(None, [
        "server.mode=dagger", "server.insecure=true", "server.host=127.0.0.1", "server.port=0",
        f"data.record_dir={tmp_path / 'ds'}", f"log_dir={tmp_path / 'serve'}",
        f"dagger.policy_path={tmp_path / 'start'}", "dagger.episodes_per_round=2",
        "dagger.updates_per_round=50", "dagger.batch_size=32", *overrides,
    ])  # fmt: skip


def run_with_agent(tmp_path: Path, config, expert: dict) -> list[dict]:
    agents = []

    def on_started(link) -> None:
        device = make_teleop("expert", expert)
        agents.append(start_agent(link.port, tmp_path / "spool", robot_id="twin", driver=TWIN, teleop=device))

    try:
        return dagger(config, on_started=on_started)
    finally:
        for agent in agents:
            agent.stop()


def read(tmp_path: Path):
    frames = pd.concat([pd.read_parquet(p) for p in sorted((tmp_path / "ds" / "data").rglob("*.parquet"))])
    return frames, pd.read_parquet(tmp_path / "ds/meta/episodes/chunk-000/file-000.parquet")


def weights(path: Path, prefix: str = "") -> torch.Tensor:
    named = load_policy(path).named_parameters()
    return torch.cat([p.detach().flatten() for name, p in named if name.startswith(prefix)])


def test_hg_dagger_rounds_learn_from_interventions_and_resume(tmp_path):
    start = initial_policy(tmp_path, **CNN)
    config = config_for(tmp_path, "dagger.rounds=2")
    rows = run_with_agent(tmp_path, config, {"mode": "gated", "patience": 2, "takeover_ticks": 4})
    assert [r["round"] for r in rows] == [0, 1]
    frames, episodes = read(tmp_path)
    assert len(episodes) == 4 and sum(r["episodes"] for r in rows) == 4
    assert sum(r["steps"] for r in rows) == len(frames)
    # The random start strays, so the expert took over; its frames (only) are the training set.
    intervened = frames[frames["intervention"]]
    assert rows[0]["intervened_steps"] > 0
    assert sum(r["intervened_steps"] for r in rows) == len(intervened)
    assert rows[1]["training_frames"] == len(intervened)  # aggregated over both rounds
    assert np.abs(np.stack(intervened["complementary_info.human_action"].to_numpy())).sum() > 0
    assert np.all(
        np.stack(frames[~frames["intervention"]]["complementary_info.human_action"].to_numpy()) == 0
    )
    assert 0 < rows[0]["intervention_rate"] <= 1
    # Each round's fit changed the policy, and each round is saved.
    out = tmp_path / "serve" / "dagger"
    w0, w1, w2 = weights(start), weights(out / "round_000/policy"), weights(out / "round_001/policy")
    assert not torch.equal(w0, w1) and not torch.equal(w1, w2)
    fitted = load_policy(out / "round_000/policy")
    assert fitted.chunk_size == 2 and not torch.equal(  # the camera's encoder was trained on the decoded mp4
        weights(start, "encoder.image_encoders"),
        weights(out / "round_000/policy", "encoder.image_encoders"),
    )
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in logged] == [0, 1]

    # A restart with more rounds continues after the newest saved round, on the same dataset.
    more = run_with_agent(tmp_path, config_for(tmp_path, "dagger.rounds=3"), {"mode": "gated", "patience": 2})
    assert [r["round"] for r in more] == [2]
    _, episodes = read(tmp_path)
    assert len(episodes) == 6


# DAgger's student: a state MLP, or a tiny VLA (tiny:openvla-oft) that reads the camera and the instruction.
STUDENTS = {"mlp": {}, "vla": {"kind": "vla", "cameras": ["front"], "chunk_size": 2}}


@pytest.mark.parametrize("student", sorted(STUDENTS))
def test_dagger_fits_the_experts_labels_on_every_visited_state(tmp_path, student):
    start = initial_policy(tmp_path, **STUDENTS[student])
    config = config_for(tmp_path, "dagger.rounds=1", "dagger.only_interventions=false")
    (row,) = run_with_agent(tmp_path, config, {"mode": "advise"})
    fitted = tmp_path / "serve" / "dagger" / "round_000" / "policy"
    assert type(load_policy(fitted)) is type(load_policy(start)) and not torch.equal(
        weights(start), weights(fitted)
    )
    frames, _ = read(tmp_path)
    assert not frames["intervention"].any() and row["intervention_rate"] == 0.0
    labels = np.stack(frames["complementary_info.human_action"].to_numpy())
    assert np.all(np.abs(labels).sum(axis=1) > 0)  # the expert labelled every state the policy visited
    assert not np.allclose(labels, np.stack(frames["action"].to_numpy()))  # ...and its labels differ
    assert row["training_frames"] == len(frames)


def test_dagger_config_errors_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"needs dagger\.policy_path"):
        load_serve_config(None, ["server.mode=dagger", f"log_dir={tmp_path}"])
    initial_policy(tmp_path)
    with pytest.raises(ConfigError, match="not a LeRobot v3 dataset"):
        config_for(tmp_path, f"dagger.datasets=[{tmp_path / 'nothing'}]")
    with pytest.raises(ConfigError, match="must be >= 1"):
        config_for(tmp_path, "dagger.rounds=0")
