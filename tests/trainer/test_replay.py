import numpy as np
import pytest
import torch

import sim_envs
from trainer.algorithms.common import random_shift
from trainer.algorithms.replay import ReplayBuffer


@pytest.fixture(scope="module")
def spec():
    return sim_envs.make("rlinf/FrankaReach-v0", image_height=16, image_width=16).env_spec


def fake_obs(spec, n, value):
    return {
        "state": np.full((n, spec.state_dim), value, np.float32),
        "images": {c.name: np.full((n, *c.shape), value, np.uint8) for c in spec.cameras},
    }


def test_ring_buffer_overwrites_the_oldest_and_samples_consistently(spec):
    buffer = ReplayBuffer(spec, capacity=5, cameras=["front"])
    for value in range(4):  # 8 transitions into 5 slots
        buffer.add(
            fake_obs(spec, 2, value),
            np.full((2, 7), value, np.float32),
            np.full(2, value),
            np.zeros(2),
            fake_obs(spec, 2, value + 1),
        )
    assert len(buffer) == 5
    assert sorted(buffer.data["reward"].tolist()) == [1, 2, 2, 3, 3]
    batch = buffer.sample(64, torch.Generator().manual_seed(0))
    assert batch["obs"]["images"]["front"].shape == (64, 16, 16, 3)
    # Every sampled row is one consistent transition: next = obs + 1, action = reward = obs.
    state = batch["obs"]["state"][:, 0]
    torch.testing.assert_close(batch["next_obs"]["state"][:, 0], state + 1)
    torch.testing.assert_close(batch["action"][:, 0], state)
    torch.testing.assert_close(batch["obs"]["images"]["front"][:, 0, 0, 0].float(), state)


def test_save_and_load_roundtrip(spec, tmp_path):
    buffer = ReplayBuffer(spec, capacity=10, cameras=["front"])
    buffer.add(
        fake_obs(spec, 3, 7),
        np.ones((3, 7), np.float32),
        np.arange(3),
        np.array([0, 1, 0]),
        fake_obs(spec, 3, 8),
    )
    buffer.save(tmp_path / "r.npz")
    loaded = ReplayBuffer(spec, capacity=10, cameras=["front"])
    loaded.load(tmp_path / "r.npz")
    assert len(loaded) == 3 and loaded.cursor == 3
    np.testing.assert_array_equal(loaded.data["terminated"][:3], [0, 1, 0])
    other = ReplayBuffer(spec, capacity=10, cameras=["front", "wrist"])
    with pytest.raises(ValueError, match=r"lacks 'image\.wrist'"):
        other.load(tmp_path / "r.npz")


def test_empty_buffer_sampling_is_a_clear_error(spec):
    with pytest.raises(ValueError, match="empty replay buffer"):
        ReplayBuffer(spec, capacity=4, cameras=[]).sample(2)


def test_random_shift_moves_content_but_keeps_shape():
    images = torch.zeros(8, 12, 12, 3, dtype=torch.uint8)
    images[:, 6, 6] = 255
    shifted = random_shift(images, pad=2, generator=torch.Generator().manual_seed(1))
    assert shifted.shape == images.shape and shifted.dtype == torch.uint8
    peaks = [tuple(np.argwhere(s[..., 0].numpy() == 255)[0]) for s in shifted]
    assert all(abs(r - 6) <= 2 and abs(c - 6) <= 2 for r, c in peaks)
    assert len(set(peaks)) > 1
    torch.testing.assert_close(random_shift(images, pad=0), images)


def test_picked_rows_are_added_and_discarded_rows_are_never_sampled(spec):
    buffer = ReplayBuffer(spec, capacity=8, cameras=[])
    rows = buffer.add(
        fake_obs(spec, 4, 0), np.zeros((4, 7), np.float32), np.arange(4.0), np.zeros(4), fake_obs(spec, 4, 1),
        rows=np.array([True, False, True, True]),
    )  # fmt: skip
    assert len(buffer) == 3 and sorted(buffer.data["reward"][:3].tolist()) == [0, 2, 3]
    buffer.discard(rows[1:])  # the rows of rewards 2 and 3: an aborted episode
    assert buffer.usable_size == 1
    assert set(buffer.sample(256)["reward"].tolist()) == {0.0}
    # Overwriting a discarded slot makes it usable again.
    for value in range(4):
        buffer.add(fake_obs(spec, 2, 0), np.zeros((2, 7), np.float32), np.full(2, 10.0 + value), np.zeros(2),
                   fake_obs(spec, 2, 0))  # fmt: skip
    assert buffer.usable_size == 8
    assert set(buffer.sample(512)["reward"].tolist()) == {10.0, 11.0, 12.0, 13.0}


def q_after_updates(source_weight: float) -> float:
    """SAC on a buffer of two sources: sim transitions with reward 0 (weight 1) and robot ones with
    reward 10 (weight ``source_weight``); the critic's mean Q after some updates."""
    from policies import PolicyConfig, make_policy
    from trainer.algorithms.sac import SAC, SACConfig

    spec = sim_envs.make("rlinf/FrankaReach-v0", cameras=(), action_rotation=False).env_spec
    torch.manual_seed(0)
    policy = make_policy(spec, PolicyConfig(head="tanh_gaussian", hidden_sizes=[32], value_head=False))
    sac = SAC(
        policy, SACConfig(batch_size=64, learning_starts=0, critic_hidden=[32], critic_learning_rate=1e-2)
    )
    obs = {
        "state": np.random.default_rng(0).normal(size=(200, spec.state_dim)).astype(np.float32),
        "images": {},
    }
    rewards = np.where(np.arange(200) < 100, 0.0, 10.0)
    weights = np.where(np.arange(200) < 100, 1.0, source_weight)
    sac.buffer.add(
        obs, np.zeros((200, spec.action.dim), np.float32), rewards, np.ones(200), obs, weights=weights
    )
    for _ in range(200):
        stats = sac.update()
    return stats["q_mean"]


def test_the_source_weight_changes_the_off_policy_update():
    ignored, counted = q_after_updates(0.0), q_after_updates(1.0)
    assert abs(ignored) < 1.0 and counted > 3.0, (ignored, counted)  # the mean target: 0 vs 5
