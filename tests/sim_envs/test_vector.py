import multiprocessing
import threading
import time

import numpy as np
import pytest

import sim_envs
from protos import ContractError
from sim_envs import vector
from sim_envs.vector import SimVectorEnv
from sim_envs.vector_worker import EnvSlot, play_chunks, receive


def random_chunks(spec, num_envs, chunk, steps, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, (num_envs, chunk, spec.action.dim)).astype(np.float32) for _ in range(steps)]


def test_chunk_step_shapes_autoreset_and_valid_mask():
    venv = sim_envs.make_vector(
        "rlinf/FrankaReach-v0", 3, cameras=("front",), image_height=32, image_width=32, max_episode_steps=5
    )
    obs, _ = venv.reset(seed=0)
    assert obs["state"].shape == (3, venv.spec.state_dim)
    assert obs["images"]["front"].shape == (3, 32, 32, 3)
    assert obs["instruction"] == [venv.spec.instruction] * 3
    actions = random_chunks(venv.spec, 3, 4, 1)[0]
    first = venv.chunk_step(actions)
    assert first.rewards.shape == (3, 4) and first.valid.all() and not first.done.any()
    second = venv.chunk_step(actions)  # steps 5..8: episodes end at step 5
    assert second.truncated[:, 0].all()
    assert second.valid[:, 0].all() and not second.valid[:, 1:].any()
    assert len(second.finished) == 3 and all(s.length == 5 for s in second.finished)
    assert all(fo is not None for fo in second.final_obs)
    # The returned observation is the first one of the next episode, not the final one.
    assert not np.allclose(second.obs["state"], np.stack([fo["state"] for fo in second.final_obs]))
    venv.close()


class CountingEnv:
    """Rewards 1, 2, 3, ... in an episode; terminates with success after ``success_at`` steps, or is
    truncated after ``limit``."""

    def __init__(self, success_at: int, limit: int) -> None:
        self.success_at, self.limit, self.steps = success_at, limit, 0

    def reset(self, seed=None):
        self.steps = 0
        return {"state": np.array([0.0], np.float32), "images": {}, "instruction": ""}, {}

    def step(self, action):
        self.steps += 1
        won = self.steps == self.success_at
        obs = {"state": np.array([self.steps], np.float32), "images": {}, "instruction": ""}
        return obs, float(self.steps), won, self.steps == self.limit and not won, {"success": won}


def test_each_envs_steps_land_in_its_own_rows_up_to_its_episodes_end():
    slots = []
    for success_at, limit in [(99, 99), (2, 99), (99, 3), (1, 99)]:  # runs on, wins, truncated, wins at once
        slot = EnvSlot.__new__(EnvSlot)  # the bookkeeping around a stand-in env
        slot.env = CountingEnv(success_at, limit)
        slot.reset(None)
        slots.append(slot)
    result = play_chunks(slots, np.zeros((4, 3, 1), np.float32))
    np.testing.assert_array_equal(result.rewards, [[1, 2, 3], [1, 2, 0], [1, 2, 3], [1, 0, 0]])
    np.testing.assert_array_equal(result.valid, [[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(result.terminated, [[0, 0, 0], [0, 1, 0], [0, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(result.truncated, [[0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0]])
    np.testing.assert_array_equal(result.success, result.terminated)
    assert result.rewards.dtype == np.float32 and result.valid.dtype == bool
    assert [(e.env_index, e.episode_return, e.length, e.success) for e in result.finished] == [
        (1, 3.0, 2, True), (2, 6.0, 3, False), (3, 1.0, 1, True)]  # fmt: skip
    # The ended envs start their next episode; their last observations are kept.
    np.testing.assert_array_equal(result.obs["state"][:, 0], [3, 0, 0, 0])
    assert [None if f is None else float(f["state"][0]) for f in result.final_obs] == [None, 2.0, 3.0, 1.0]


def test_one_step_chunks_keep_the_same_books_as_longer_chunks():
    """``play_chunks`` takes a flat path for one-step chunks; step by step it must say what three-step
    chunks say of the same episodes: rewards, ends, success, finished summaries, final observations."""

    def counting_slots():
        slots = []
        for success_at, limit in [(99, 99), (2, 99), (99, 3), (1, 99)]:
            slot = EnvSlot.__new__(EnvSlot)
            slot.env = CountingEnv(success_at, limit)
            slot.reset(None)
            slots.append(slot)
        return slots

    chunked = play_chunks(counting_slots(), np.zeros((4, 3, 1), np.float32))
    slots = counting_slots()
    alive = np.ones(4, bool)  # an env whose episode ended is padded out of the 3-step chunk
    for t in range(3):
        step = play_chunks(slots, np.zeros((4, 1, 1), np.float32))
        assert step.rewards.shape == step.valid.shape == (4, 1) and step.valid.all()
        np.testing.assert_array_equal(step.rewards[alive, 0], chunked.rewards[alive, t])
        for key in ("terminated", "truncated", "success"):
            np.testing.assert_array_equal(getattr(step, key)[alive, 0], getattr(chunked, key)[alive, t])
        ended = [e for e in chunked.finished if alive[e.env_index] and e.length == t + 1]
        assert [(e.env_index, e.episode_return, e.length, e.success) for e in step.finished if alive[e.env_index]] == [
            (e.env_index, e.episode_return, e.length, e.success) for e in ended]  # fmt: skip
        for e in ended:
            assert float(step.final_obs[e.env_index]["state"][0]) == float(
                chunked.final_obs[e.env_index]["state"][0]
            )
            assert step.obs["state"][e.env_index, 0] == 0  # the next episode's first observation
        alive &= ~step.done
    # Env 0 ran on all three steps without ending; its books carry over from call to call.
    assert slots[0].episode_length == 3 and slots[0].episode_return == 6.0


def test_subprocess_backend_matches_inline():
    kwargs = {"cameras": (), "max_episode_steps": 6}
    inline = sim_envs.make_vector("rlinf/FrankaPush-v0", 4, **kwargs)
    spawned = sim_envs.make_vector("rlinf/FrankaPush-v0", 4, backend="subprocess", num_workers=2, **kwargs)
    try:
        a, _ = inline.reset(seed=11)
        b, _ = spawned.reset(seed=11)
        np.testing.assert_allclose(a["state"], b["state"])
        for actions in random_chunks(inline.spec, 4, 3, 4):
            ra, rb = inline.chunk_step(actions), spawned.chunk_step(actions)
            np.testing.assert_allclose(ra.obs["state"], rb.obs["state"], atol=1e-6)
            np.testing.assert_allclose(ra.rewards, rb.rewards, atol=1e-6)
            np.testing.assert_array_equal(ra.valid, rb.valid)
    finally:
        inline.close()
        spawned.close()


def test_bad_actions_are_rejected_in_both_backends():
    for backend in ("inline", "subprocess"):
        venv = sim_envs.make_vector("rlinf/FrankaReach-v0", 2, backend=backend, cameras=())
        venv.reset(seed=0)
        with pytest.raises(ContractError, match=r"actions expected \[2, chunk, 7\]"):
            venv.chunk_step(np.zeros((2, 3, 6), np.float32))
        bad = np.zeros((2, 1, 7), np.float32)
        bad[1, 0, 4] = np.nan
        with pytest.raises(ContractError, match=r"action\[4\] \(dpitch\) is nan"):
            venv.chunk_step(bad)
        venv.close()


def test_single_step_api():
    venv = sim_envs.make_vector("rlinf/FrankaReach-v0", 2, cameras=())
    venv.reset(seed=0)
    result = venv.step(np.zeros((2, 7), np.float32))
    assert result.rewards.shape == (2, 1)
    with pytest.raises(ContractError):
        venv.step(np.zeros(7, np.float32))
    venv.close()


def test_subprocess_workers_start_without_writing_to_stderr():
    # A worker that warns on start (runpy's "found in sys.modules" for ``-m``) lands its line after
    # the trainer's one-line error, so the user's last line is a warning, not the error.
    import subprocess
    import sys

    script = (
        "import sim_envs\n"
        "v = sim_envs.make_vector('rlinf/FrankaReach-v0', 2, backend='subprocess', "
        "cameras=())\n"
        "v.close()\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stderr.strip() == ""


def test_a_spinning_worker_gives_the_same_results_as_a_blocking_one():
    config = {"cameras": (), "max_episode_steps": 6}
    blocking = SimVectorEnv("rlinf/FrankaPush-v0", 2, backend="subprocess", env_config=config, spin_wait_s=0)
    spinning = SimVectorEnv(
        "rlinf/FrankaPush-v0", 2, backend="subprocess", env_config=config, spin_wait_s=0.002
    )
    try:
        np.testing.assert_allclose(blocking.reset(seed=3)[0]["state"], spinning.reset(seed=3)[0]["state"])
        for actions in random_chunks(blocking.spec, 2, 3, 4):
            a, b = blocking.chunk_step(actions), spinning.chunk_step(actions)
            np.testing.assert_allclose(a.obs["state"], b.obs["state"], atol=1e-6)
            np.testing.assert_array_equal(a.valid, b.valid)
    finally:
        blocking.close()
        spinning.close()


@pytest.mark.parametrize(
    ("cores", "workers", "spins"),
    [({0, 1}, 1, True), ({0, 1}, 2, False), (set(range(16)), 8, True), ({1}, 1, False)],  # {1}: taskset -c 1
)
def test_workers_spin_only_where_each_process_has_a_core(monkeypatch, cores, workers, spins):
    monkeypatch.setattr(vector, "allowed_cores", lambda: cores)  # the affinity mask, not the machine's count
    parent_spins = []

    def recording_receive(conn, spin_s):
        parent_spins.append(spin_s)
        return receive(conn, spin_s)

    monkeypatch.setattr(vector, "receive", recording_receive)
    venv = SimVectorEnv("rlinf/FrankaReach-v0", workers, backend="subprocess", num_workers=workers,
                        env_config={"cameras": ()})  # fmt: skip
    try:
        venv.reset(seed=0)
        assert venv.spin_wait_s == (vector.SPIN_WAIT_S if spins else 0.0)  # the workers' wait for a command
        # the parent's wait for the workers' answers: the ready handshake's and the reset's
        assert parent_spins == [vector.ANSWER_SPIN_S if spins else 0.0] * (2 * workers)
    finally:
        venv.close()


def test_the_parent_polls_through_short_waits_only_and_never_where_the_workers_block():
    short, long = vector.ANSWER_SPIN_S / 2, vector.ANSWER_SPIN_S * 2
    assert vector.answer_spin(vector.SPIN_WAIT_S, 0.0) == vector.ANSWER_SPIN_S  # before any wait
    assert vector.answer_spin(vector.SPIN_WAIT_S, short) == vector.ANSWER_SPIN_S
    assert vector.answer_spin(vector.SPIN_WAIT_S, long) == vector.SPIN_WAIT_S  # e.g. cameras rendering
    assert vector.answer_spin(0.0, short) == vector.answer_spin(0.0, long) == 0.0


def test_a_spinning_receive_polls_on_a_core_and_a_blocking_one_sleeps():
    def wait_for_a_late_message(spin_s: float) -> tuple[object, float]:
        ours, theirs = multiprocessing.Pipe()
        sender = threading.Timer(0.15, theirs.send, args=(("ok", 7),))
        sender.start()
        cpu = time.thread_time()
        message = receive(ours, spin_s)
        sender.join()
        return message, time.thread_time() - cpu

    blocked, blocked_cpu = wait_for_a_late_message(0.0)
    spun, spun_cpu = wait_for_a_late_message(0.05)  # spins 50 ms, then blocks for the rest
    assert blocked == spun == ("ok", 7)
    assert spun_cpu > 0.02 > blocked_cpu


def test_a_spin_wait_outside_its_range_is_refused():
    with pytest.raises(ValueError, match=r"spin_wait_s must be in \[0, 0.1\] seconds, got 1.0"):
        SimVectorEnv("rlinf/FrankaReach-v0", 1, backend="subprocess", spin_wait_s=1.0)
