"""Any gymnasium env behind the env contract: spec from its spaces, success from an info key, the
subprocess vector workers, training through ``rlinf-trainer train``, and one-line refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import sim_envs
from trainer.configs import load_config
from trainer.runner import Runner

TOY = {"module": "tests.sim_envs.toy_gym_env", "success_key": "is_success"}


def test_the_spec_comes_from_the_spaces_and_the_env_checker_passes():
    env = sim_envs.make("toy/ReachDot-v0", **TOY)
    spec = env.env_spec
    assert spec.camera_names == ("camera",) and spec.camera("camera").shape == (32, 32, 3)
    assert [(f.name, f.size) for f in spec.state_fields] == [("position", 2), ("target", 2)]
    assert spec.action.kind == "box" and spec.action.dim == 2 and spec.max_episode_steps == 20
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=3)
    np.testing.assert_allclose(obs["state"][2:], env.env.unwrapped.target, rtol=1e-6)
    target = env.env.unwrapped.target - env.env.unwrapped.position
    _, _, terminated, _, info = env.step(np.clip(target * 10, -1, 1))
    for _ in range(30):
        if terminated:
            break
        target = env.env.unwrapped.target - env.env.unwrapped.position
        _, _, terminated, _, info = env.step(np.clip(target * 10, -1, 1))
    assert terminated and info["success"]  # read from info["is_success"]


def test_subprocess_workers_import_the_module_themselves():
    venv = sim_envs.make_vector("toy/ReachDot-v0", 4, backend="subprocess", num_workers=2, **TOY)
    try:
        obs, _ = venv.reset(seed=0)
        assert obs["images"]["camera"].shape == (4, 32, 32, 3) and obs["state"].shape == (4, 4)
        result = venv.chunk_step(np.zeros((4, 25, 2), np.float32))
        assert result.truncated.any(axis=1).all()  # the registered 20-step limit ends every episode
    finally:
        venv.close()


def test_one_step_chunks_of_a_state_row_env_say_what_its_adapters_say_stepped_by_hand():
    """A flat-Box env's one-step chunks skip the per-env observation dicts (``step_state``, rows
    batched at once): every step must still match the adapter's own ``step`` on the same seeds."""
    n = 3
    venv = sim_envs.make_vector("toy/ReachDotState-v0", n, **TOY)
    by_hand = [sim_envs.make("toy/ReachDotState-v0", **TOY) for _ in range(n)]
    assert by_hand[0].state_rows  # the lean path is the one under test
    obs, _ = venv.reset(seed=5)
    hand_obs = [env.reset(seed=5 + i)[0] for i, env in enumerate(by_hand)]
    np.testing.assert_array_equal(obs["state"], np.stack([o["state"] for o in hand_obs]))
    books = [[0.0, 0, False] for _ in range(n)]
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(45):
        state = obs["state"]
        toward = np.clip((state[:, 2:] - state[:, :2]) * 10, -1, 1)  # env 0 reaches its target
        actions = np.stack([toward[0], rng.uniform(-1, 1, 2), np.zeros(2)]).astype(np.float32)
        result = venv.chunk_step(actions[:, None, :])
        assert (
            result.obs["state"].dtype == np.float32
            and result.obs["instruction"] == ["toy/ReachDotState-v0"] * n
        )
        expected_finished = []
        for i, env in enumerate(by_hand):
            step_obs, reward, terminated, truncated, info = env.step(actions[i])
            assert result.rewards[i, 0] == np.float32(reward) and result.valid[i, 0]
            assert (result.terminated[i, 0], result.truncated[i, 0]) == (terminated, truncated)
            assert result.success[i, 0] == info["success"]
            books[i] = [books[i][0] + reward, books[i][1] + 1, books[i][2] or info["success"]]
            if terminated or truncated:
                ends["terminated" if terminated else "truncated"] += 1
                np.testing.assert_array_equal(result.final_obs[i]["state"], step_obs["state"])
                expected_finished.append((i, *books[i]))
                books[i] = [0.0, 0, False]
                step_obs, _ = env.reset()
            else:
                assert result.final_obs[i] is None
            np.testing.assert_array_equal(result.obs["state"][i], step_obs["state"])
        got = [(e.env_index, e.episode_return, e.length, e.success) for e in result.finished]
        assert got == [(i, pytest.approx(r), length, won) for i, r, length, won in expected_finished]
        obs = result.obs
    venv.close()
    assert ends["terminated"] >= 1 and ends["truncated"] >= 2  # both ends were met, and compared


@pytest.mark.filterwarnings("ignore:.*share an object")  # gymnasium's checker says so, rightly
@pytest.mark.parametrize("chunk", [1, 25])
def test_an_episodes_final_row_survives_an_env_that_reuses_its_observation_array(chunk):
    venv = sim_envs.make_vector("toy/ReachDotSharedRow-v0", 1, **TOY)
    first, _ = venv.reset(seed=1)
    for _ in range(20 // chunk or 1):  # standing still for the 20-step limit: the last row is the first
        result = venv.chunk_step(np.zeros((1, chunk, 2), np.float32))
    venv.close()
    assert result.truncated[0].any()
    np.testing.assert_array_equal(result.final_obs[0]["state"], first["state"][0])
    assert not np.array_equal(result.obs["state"][0], first["state"][0])  # the next episode's start


@pytest.mark.slow
def test_ppo_trains_on_an_outside_env_through_the_cli_config(tmp_path):
    overrides = [
        "env.id=toy/ReachDot-v0", "env.num_envs=8", "env.backend=inline",
        f"env.kwargs={json.dumps({**TOY, 'max_episode_steps': 20})}", "run.total_env_steps=16000",
        "run.eval_every=0", f"run.output_dir={tmp_path}",
    ]  # fmt: skip
    Runner(load_config("ppo_gym", overrides)).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    first, last = (
        np.mean([r["return_mean"] for r in rows[:3]]),
        np.mean([r["return_mean"] for r in rows[-3:]]),
    )
    assert last > first + 1.0, (first, last)
    # The run's final evaluation works on an env that cannot render: figures, no video.
    final = json.loads((tmp_path / "final_eval.json").read_text())
    assert final["episodes"] == 10 and final["video"] == ""


@pytest.mark.parametrize(
    ("env_id", "config", "message"),
    [
        ("CartPole-v1", {}, "the action space is Discrete; only a Box maps"),
        ("toy/ReachDot-v0", {"module": "no.such.module"}, "env module 'no.such.module' cannot be imported"),
        ("toy/Nope-v0", {}, "unknown env id 'toy/Nope-v0'; known: .* env.kwargs.module"),
    ],
)
def test_envs_that_do_not_map_are_one_line_errors(env_id, config, message):
    with pytest.raises(ValueError, match=message):
        sim_envs.make(env_id, **config)
