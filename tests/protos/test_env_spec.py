import numpy as np
import pytest

from protos import (
    ActionSpace,
    CameraSpec,
    ContractError,
    EnvSpec,
    StateField,
    ee_delta_action_space,
    validate_action,
    validate_observation,
)

FRONT = (CameraSpec("front", 8, 6, 10.0),)


def make_spec(cameras=FRONT) -> EnvSpec:
    return EnvSpec(
        name="test",
        cameras=cameras,
        state_fields=(StateField("tcp_pos", 3), StateField("gripper_width", 1)),
        action=ee_delta_action_space(rotation=False),
        control_hz=10.0,
        instruction="pick it up",
        max_episode_steps=5,
    )


def valid_obs(spec: EnvSpec) -> dict:
    return {
        "images": {c.name: np.zeros(c.shape, np.uint8) for c in spec.cameras},
        "state": np.zeros(spec.state_dim, np.float32),
        "instruction": spec.instruction,
    }


def test_spec_shapes_and_roundtrip():
    spec = make_spec()
    assert spec.state_dim == 4
    assert spec.action.dim == 4
    assert spec.state_slices() == {"tcp_pos": slice(0, 3), "gripper_width": slice(3, 4)}
    assert EnvSpec.from_dict(spec.to_dict()) == spec


def test_spec_rejects_duplicate_names_and_bad_bounds():
    with pytest.raises(ValueError, match="camera names must be unique"):
        make_spec(cameras=(CameraSpec("a", 1, 1, 1), CameraSpec("a", 1, 1, 1)))
    with pytest.raises(ValueError, match=r"low 1\.0 >= high 1\.0"):
        ActionSpace("joint_position", ("j1",), (1.0,), (1.0,))
    with pytest.raises(ValueError, match="action kind"):
        ActionSpace("teleport", ("x",), (0.0,), (1.0,))


def test_valid_action_and_chunk_pass():
    spec = make_spec()
    out = validate_action(spec, [0.1, -0.2, 0.3, 1.0])
    assert out.dtype == np.float32
    chunk = validate_action(spec, np.zeros((5, 4)), allow_chunk=True)
    assert chunk.shape == (5, 4)


@pytest.mark.parametrize(
    ("action", "allow_chunk", "message"),
    [
        (np.zeros(3), False, r"action shape expected \[4\], got \[3\]"),
        (np.zeros((2, 4)), False, r"action shape expected \[4\], got \[2, 4\]"),
        (np.zeros((2, 3)), True, r"expected \[4\] or \[chunk, 4\], got \[2, 3\]"),
        (np.array(["a", "b", "c", "d"]), False, "dtype must be float32"),
        (np.array([0.0, np.nan, 0.0, 0.0]), False, r"action\[1\] \(dy\) is nan"),
        (np.array([[0, 0, 0, 0], [0, 0, np.inf, 0]], float), True, r"action\[1, 2\] \(dz\) is inf"),
        (np.array([0.0, 0.0, 0.0, 1.5]), False, r"action\[3\] \(gripper\) = 1.5 is outside \[-1, 1\]"),
    ],
)
def test_bad_actions_name_the_field(action, allow_chunk, message):
    with pytest.raises(ContractError, match=message):
        validate_action(make_spec(), action, allow_chunk=allow_chunk)


def test_observation_validation():
    spec = make_spec()
    validate_observation(spec, valid_obs(spec))
    obs = valid_obs(spec)
    obs["images"]["front"] = np.zeros((480, 640, 3), np.uint8)
    with pytest.raises(ContractError, match="camera 'front' expected 8x6x3, got 480x640x3"):
        validate_observation(spec, obs)
    obs = valid_obs(spec)
    obs["state"] = obs["state"].astype(np.float64)
    with pytest.raises(ContractError, match="state expected float32"):
        validate_observation(spec, obs)
    obs = valid_obs(spec)
    obs["state"][3] = np.nan
    with pytest.raises(ContractError, match=r"state\[3\] \(gripper_width\) is not finite"):
        validate_observation(spec, obs)
    obs = valid_obs(spec)
    del obs["images"]["front"]
    with pytest.raises(ContractError, match="observation cameras expected"):
        validate_observation(spec, obs)


def test_spec_mismatch_compares_state_fields_by_name_and_order_not_just_size():
    from protos.env_spec import spec_mismatch

    def spec(*fields, action_dim=7, size=64) -> EnvSpec:
        return EnvSpec("t", (CameraSpec("front", size, size, 10.0),), tuple(StateField(n, s) for n, s in fields),
                       ee_delta_action_space(rotation=action_dim == 7), 10.0, "", 5)  # fmt: skip

    policy = spec(("tcp_pos", 3), ("tcp_quat", 4), ("gripper_width", 1))
    assert spec_mismatch(policy, spec(("tcp_pos", 3), ("tcp_quat", 4), ("gripper_width", 1))) is None
    # The same 8 values in another order would be read as the wrong things: refused, naming where.
    reordered = spec(("tcp_quat", 4), ("tcp_pos", 3), ("gripper_width", 1))
    assert spec_mismatch(policy, reordered, "robot r1") == (
        "state fields differ from field 0 on: expected tcp_pos[3], tcp_quat[4], gripper_width[1]; "
        "robot r1 has tcp_quat[4], tcp_pos[3], gripper_width[1]"
    )
    assert "from field 2 on" in spec_mismatch(policy, spec(("tcp_pos", 3), ("tcp_quat", 4)))
    assert spec_mismatch(
        policy, spec(*[("tcp_pos", 3), ("tcp_quat", 4), ("gripper_width", 1)], action_dim=4)
    ) == ("expected action dim 7, the robot has 4")
    assert "camera 'front': expected (64, 64, 3)" in spec_mismatch(
        policy, spec(("tcp_pos", 3), ("tcp_quat", 4), ("gripper_width", 1), size=32)
    )
