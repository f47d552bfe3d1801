import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.checkpoint import latest_checkpoint
from trainer.configs import ConfigError, load_config
from trainer.runner import Runner

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "env.id=rlinf/FrankaReach-v0",
    "env.num_envs=4",
    "env.backend=inline",
    "env.kwargs.cameras=[]",
    "policy.hidden_sizes=[32,32]",
    "algo.update_epochs=2",
    "algo.num_minibatches=2",
    "run.eval_every=2",
    "run.eval_episodes=1",
    "run.final_eval_episodes=2",
    "run.checkpoint_every=2",
    "run.keep_checkpoints=2",
]


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_short_run_writes_metrics_tensorboard_checkpoints_and_video(tmp_path):
    config = load_config(
        None, [*SMALL, f"run.output_dir={tmp_path}", "run.total_env_steps=800", "run.checkpoint_every=1"]
    )
    progress = Runner(config).run()
    assert progress.env_steps == 800 and progress.iteration == 4
    rows = read_metrics(tmp_path)
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    for row in rows:
        assert {"iteration", "env_steps", "wall_s", "return_mean", "success_rate"} <= set(row)
    assert [r["env_steps"] for r in rows] == [200, 400, 600, 800]
    assert "eval/success_rate" in rows[1] and "eval/success_rate" not in rows[0]
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert latest_checkpoint(tmp_path).name == "step_800"
    assert (tmp_path / "checkpoints" / "step_800" / "policy").exists()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_600", "step_800"]
    assert (tmp_path / "checkpoints" / "latest").resolve() == (
        tmp_path / "checkpoints" / "step_800"
    ).resolve()
    assert (tmp_path / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path.parent / "latest").exists()  # runs/latest is for default-named runs only
    assert (tmp_path / "videos" / "step_400.gif").stat().st_size > 1000
    assert (tmp_path / "config.yaml").exists()
    # A completed run ends with greedy episodes on held-out seeds, and a GIF of one of them.
    final = json.loads((tmp_path / "final_eval.json").read_text())
    assert final["episodes"] == 2 and final["env_steps"] == 800 and 0.0 <= final["success_rate"] <= 1.0
    assert (
        Path(final["video"]) == tmp_path / "videos" / "final.gif"
        and Path(final["video"]).stat().st_size > 1000
    )


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    full_dir, split_dir = tmp_path / "full", tmp_path / "split"
    Runner(load_config(None, [*SMALL, f"run.output_dir={full_dir}", "run.total_env_steps=1200"])).run()
    Runner(load_config(None, [*SMALL, f"run.output_dir={split_dir}", "run.total_env_steps=400"])).run()
    resumed = load_config(str(split_dir / "config.yaml"), ["run.total_env_steps=1200"])
    Runner(resumed, resume_dir=split_dir).run()
    full, split = read_metrics(full_dir), read_metrics(split_dir)
    assert [r["iteration"] for r in split] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(full, split, strict=True):
        for key in (
            "env_steps",
            "return_mean",
            "success_rate",
            "train/policy_loss",
            "train/value_loss",
            "train/approx_kl",
        ):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (a["iteration"], key)


def test_starting_over_an_existing_run_is_refused(tmp_path):
    Runner(load_config(None, [*SMALL, f"run.output_dir={tmp_path}", "run.total_env_steps=200"])).run()
    with pytest.raises(ConfigError, match="already holds a run; pass --resume"):
        Runner(load_config(None, [*SMALL, f"run.output_dir={tmp_path}"]))


def test_evaluations_run_with_eval_kwargs_over_the_training_kwargs(tmp_path):
    # Sparse reward only where evaluating: the greedy returns count success steps (whole numbers),
    # while training's dense returns are fractions.
    config = load_config(None, [*SMALL, f"run.output_dir={tmp_path}", "run.total_env_steps=400",
                                "run.video=false", "env.eval_kwargs={reward_type: sparse}"])  # fmt: skip
    Runner(config).run()
    rows = read_metrics(tmp_path)
    final = json.loads((tmp_path / "final_eval.json").read_text())
    assert rows[1]["eval/return_mean"] == int(rows[1]["eval/return_mean"])
    assert final["return_mean"] * final["episodes"] == int(final["return_mean"] * final["episodes"])
    assert all(r["return_mean"] != int(r["return_mean"]) for r in rows)


def test_a_bad_eval_kwargs_key_fails_before_training(tmp_path):
    config = load_config(None, [*SMALL, f"run.output_dir={tmp_path}", "env.eval_kwargs={reward: sparse}"])
    with pytest.raises(ConfigError, match=r"env\.eval_kwargs: unknown key 'reward' in env config"):
        Runner(config).run()
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_resume_with_another_policy_shape_says_so(tmp_path):
    Runner(load_config(None, [*SMALL, f"run.output_dir={tmp_path}", "run.total_env_steps=200"])).run()
    changed = load_config(
        str(tmp_path / "config.yaml"), ["policy.hidden_sizes=[64,64]", "run.total_env_steps=400"]
    )
    with pytest.raises(ValueError, match=r"checkpoint parameter .* has shape"):
        Runner(changed, resume_dir=tmp_path).run()


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_saves_a_checkpoint_and_the_run_resumes(tmp_path, stop):
    exe = Path(sys.executable).with_name("rlinf-trainer")
    args = [
        str(exe),
        "train",
        *SMALL,
        "run.checkpoint_every=1000",
        "run.eval_every=0",
        f"run.output_dir={tmp_path}",
    ]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = tmp_path / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        time.sleep(0.2)
    proc.send_signal(stop)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + stop, output
    assert "interrupted: saved" in output and "Traceback" not in output
    assert f"rlinf-trainer train --resume {tmp_path}" in output
    assert not (tmp_path / "final_eval.json").exists()  # an interrupted run is not finished
    checkpoint = latest_checkpoint(tmp_path)
    assert checkpoint is not None
    done_steps = int(checkpoint.name.split("_")[1])
    assert done_steps >= 400
    total = done_steps + 200
    resumed = subprocess.run(
        [str(exe), "train", "--resume", str(tmp_path), f"run.total_env_steps={total}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert resumed.returncode == 0, resumed.stderr
    assert read_metrics(tmp_path)[-1]["env_steps"] == total
    assert "final evaluation: success" in resumed.stdout
    assert json.loads((tmp_path / "final_eval.json").read_text())["env_steps"] == total


@pytest.mark.slow
def test_image_rlpd_runs_with_demos_from_a_privileged_twin(tmp_path):
    overrides = [
        f"run.output_dir={tmp_path}",
        "run.total_env_steps=160",
        "run.eval_every=1",
        "run.eval_episodes=1",
        "run.video=false",
        "env.num_envs=2",
        "env.kwargs.image_height=32",
        "env.kwargs.image_width=32",
        "env.kwargs.max_episode_steps=80",
        "policy.cnn_channels=[8,8]",
        "policy.cnn_features=32",
        "policy.hidden_sizes=[32]",
        "algo.critic_hidden=[32]",
        "algo.demo_episodes=2",
        "algo.utd_ratio=0.1",
        "algo.batch_size=16",
        "algo.buffer_capacity=1000",
        "algo.demo_capacity=1000",
    ]
    Runner(load_config("rlpd_pick_lift_image", overrides)).run()
    rows = read_metrics(tmp_path)
    assert rows[-1]["env_steps"] == 160
    assert "train/critic_loss" in rows[-1]
    # The demos were scripted with the cube pose but stored with proprioception only (22 dims).
    import numpy as np

    demos = np.load(latest_checkpoint(tmp_path) / "demos.npz")
    assert demos["state"].shape == (160, 22)
    assert demos["image.wrist"].shape == (160, 32, 32, 3)
    assert demos["reward"].max() == 1.0  # the scripted controller succeeded at least once


def test_the_final_checkpoint_counts_against_keep_checkpoints(tmp_path):
    config = load_config(
        None, [*SMALL, f"run.output_dir={tmp_path}", "run.total_env_steps=1000", "run.eval_every=0"]
    )
    Runner(config).run()  # saves at iterations 2 and 4, and the final one at 5
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_1000", "step_800"]


def test_an_insecure_server_listens_on_loopback_unless_told_otherwise():
    from trainer.server.config import load_serve_config
    from trainer.server.link_hosting import link_config

    assert link_config(load_serve_config(None, ["server.insecure=true"])).host == "127.0.0.1"
    assert (
        link_config(load_serve_config(None, ["server.insecure=true", "server.host=0.0.0.0"])).host
        == "0.0.0.0"
    )
    from trainer.server.link_hosting import listen_host

    assert listen_host(load_serve_config(None, []).server) == "0.0.0.0"  # with TLS: every interface
