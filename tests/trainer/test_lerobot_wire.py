"""LeRobot's async-inference messages: pickles read without running one, answers LeRobot's own
unpickler turns into its classes, and every field of what a robot sends bounded and named."""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
import types
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest

from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
from trainer.server import lerobot_wire as wire
from trainer.server.lerobot_server import (
    MESSAGES,
    LerobotMapping,
    LerobotPolicyServer,
    max_observation_bytes,
    peer_address,
    setup_problem,
    to_observation,
)


@pytest.fixture
def helpers(monkeypatch):
    """A stand-in for ``lerobot.async_inference.helpers`` with its record classes, so this test can
    write and read pickles as LeRobot's client does without LeRobot installed."""
    module = types.ModuleType(wire.HELPERS)

    @dataclass
    class RemotePolicyConfig:
        policy_type: str
        pretrained_name_or_path: str
        lerobot_features: dict
        actions_per_chunk: int
        device: str = "cpu"
        rename_map: dict = field(default_factory=dict)

    from benchmarks.peers import (
        lerobot_peer,  # the same two records, as the link benchmark's peer writes them
    )

    # Subclasses under LeRobot's names (the peer's own classes stay as they are).
    TimedObservation = type("TimedObservation", (lerobot_peer.TimedObservation,), {})
    TimedAction = type("TimedAction", (lerobot_peer.TimedAction,), {})

    for cls in (RemotePolicyConfig, TimedObservation, TimedAction):
        cls.__module__, cls.__qualname__ = wire.HELPERS, cls.__name__
        setattr(module, cls.__name__, cls)
    for name in ("lerobot", "lerobot.async_inference"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, wire.HELPERS, module)
    return module


def features(state_dim: int = 3, camera=(8, 8, 3)) -> dict:
    """As ``hw_to_dataset_features`` writes a robot's observation features."""
    out = {
        "observation.state": {
            "dtype": "float32",
            "shape": (state_dim,),
            "names": [f"j{i}.pos" for i in range(state_dim)],
        }
    }
    if camera:
        out["observation.images.front"] = {
            "dtype": "image",
            "shape": camera,
            "names": ["height", "width", "channels"],
        }
    return out


SPEC = EnvSpec(
    name="t", cameras=(CameraSpec("front", 8, 8, 10.0),), state_fields=(StateField("q", 3),),
    action=ee_delta_action_space(rotation=False), control_hz=10.0, instruction="lift it", max_episode_steps=5,
)  # fmt: skip


def test_a_pickle_that_would_run_code_is_refused_before_anything_runs(tmp_path):
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    with pytest.raises(wire.WireError, match=r"refused to build (posix|os)\.system"):
        wire.load_timed_observation(pickle.dumps(Exploit()))
    assert not marker.exists()
    import torch

    with pytest.raises(wire.WireError, match="refused to build torch"):  # torch's rebuilders are not needed
        wire.safe_loads(pickle.dumps(torch.zeros(2)))
    huge = b"\x80\x02cnumpy\nndarray\nJ\x00\x00\x00\x7f\x85R."  # numpy.ndarray((2**31 - 2**24,)): 2 GB
    with pytest.raises(wire.WireError, match=r"refused to build numpy\.ndarray directly"):
        wire.safe_loads(huge)


@pytest.mark.parametrize("protocol", [2, 5])
def test_observations_load_with_their_arrays_and_numbers(helpers, protocol):
    image = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
    raw = {"j0.pos": 0.5, "j1.pos": np.float32(-1.0), "j2.pos": 2, "front": image, "task": "lift"}
    data = pickle.dumps(helpers.TimedObservation(12.5, 7, raw, must_go=True), protocol=protocol)
    timed = wire.load_timed_observation(data)
    assert (timed.timestamp, timed.timestep, timed.must_go) == (12.5, 7, True)
    np.testing.assert_array_equal(timed.observation["front"], image)
    setup = wire.load_policy_setup(
        pickle.dumps(helpers.RemotePolicyConfig("pi0", "lerobot/pi0_base", features(), 5))
    )
    assert setup.state_names == ("j0.pos", "j1.pos", "j2.pos") and setup.cameras == {"front": (8, 8, 3)}
    obs = to_observation(timed, setup, SPEC, LerobotMapping({"front": "front"}))
    assert obs["state"].tolist() == [0.5, -1.0, 2.0] and obs["instruction"] == "lift"


def test_what_a_robot_sends_is_bounded_and_named(helpers):
    def setup_error(**changes) -> str:
        fields = {
            "policy_type": "act",
            "pretrained_name_or_path": "x",
            "lerobot_features": features(),
            "actions_per_chunk": 5,
        }
        with pytest.raises(wire.WireError) as caught:
            wire.load_policy_setup(pickle.dumps(helpers.RemotePolicyConfig(**{**fields, **changes})))
        return str(caught.value)

    assert "actions_per_chunk must be 1 to 1000" in setup_error(actions_per_chunk=0)
    assert "policy_type must be text of at most 512" in setup_error(policy_type="p" * 10_000)
    assert "at most 64 features" in setup_error(lerobot_features={f"k{i}": {} for i in range(100)})
    assert "RGB image shape" in setup_error(lerobot_features=features(camera=(8, 8, 4)))
    assert "a state name must be text" in setup_error(
        lerobot_features={"observation.state": {"shape": (1,), "names": [3]}}
    )

    def observation_error(raw: dict, protocol: int = 5) -> str:
        with pytest.raises(wire.WireError) as caught:
            wire.load_timed_observation(
                pickle.dumps(helpers.TimedObservation(1.0, 0, raw), protocol=protocol)
            )
        return str(caught.value)

    assert "at most 64 values" in observation_error({f"k{i}": 0 for i in range(100)})
    assert "must be a number, text or an array" in observation_error({"j0.pos": [1, 2]})
    assert "arrays must be of numbers" in observation_error({"front": np.array([object()], dtype=object)})
    assert "arrays must be of numbers" in observation_error({"front": np.array(["a"])}, protocol=2)
    with pytest.raises(wire.WireError, match="not a readable LeRobot message"):
        wire.safe_loads(pickle.dumps(helpers.TimedObservation(1.0, 0, {}))[:-9])

    setup = wire.load_policy_setup(pickle.dumps(helpers.RemotePolicyConfig("act", "x", features(), 5)))
    mapping = LerobotMapping({"front": "front"})
    good = {"j0.pos": 0.0, "j1.pos": 0.0, "j2.pos": 0.0, "front": np.zeros((8, 8, 3), np.uint8)}
    for raw, reason in [
        ({"front": good["front"]}, "lacks the state values"),
        ({**good, "j1.pos": float("nan")}, "must be finite"),
        ({**good, "j1.pos": "high"}, "must be numbers"),
        ({**good, "front": np.zeros((8, 8, 3), np.float32)}, r"must be uint8\[8, 8, 3\]"),
        ({**good, "task": "t" * 5000}, "at most 4096 characters"),
    ]:
        with pytest.raises(wire.WireError, match=reason):
            to_observation(wire.TimedObservation(0.0, 0, raw, False), setup, SPEC, mapping)
    assert setup_problem(setup, SPEC, mapping) is None
    assert "the policy reads 3" in setup_problem(
        wire.PolicySetup("a", "b", ("j0",), {}, 1, "cpu"), SPEC, mapping
    )
    assert "no camera ['front']" in setup_problem(
        wire.PolicySetup("a", "b", ("a", "b", "c"), {}, 1, "cpu"), SPEC, mapping
    )


def test_a_bigger_camera_frame_is_resized_to_the_policys(helpers):
    setup = wire.PolicySetup("act", "x", ("j0.pos", "j1.pos", "j2.pos"), {"front": (16, 24, 3)}, 5, "cpu")
    frame = np.full((16, 24, 3), 200, np.uint8)
    frame[:, :12] = 10  # left half dark
    raw = {"j0.pos": 0.0, "j1.pos": 0.0, "j2.pos": 0.0, "front": frame}
    image = to_observation(
        wire.TimedObservation(0.0, 0, raw, False), setup, SPEC, LerobotMapping({"front": "front"})
    )["images"]["front"]
    assert image.shape == (8, 8, 3) and image.dtype == np.uint8
    assert image[:, :3].max() == 10 and image[:, 5:].min() == 200  # the halves stay where they were


def test_answers_are_lerobots_own_timed_actions(helpers):
    import torch

    chunk = np.array([[0.25, -1.5, 3.0], [1e-8, 2.0, -0.125]], np.float32)
    actions = pickle.loads(wire.dump_timed_actions(chunk, 100.0, 2**31 + 5, 0.1))  # what the robot runs
    assert [type(a) for a in actions] == [helpers.TimedAction] * 2
    assert [a.timestep for a in actions] == [2**31 + 5, 2**31 + 6]
    assert actions[1].timestamp == pytest.approx(100.1)
    assert all(a.action.dtype == torch.float32 for a in actions)
    np.testing.assert_array_equal(np.stack([a.action.numpy() for a in actions]), chunk)


def test_peer_addresses_are_parsed_as_grpc_writes_them():
    assert str(peer_address("ipv4:10.0.0.7:5555")) == "10.0.0.7"
    assert str(peer_address("ipv6:[::1]:5555")) == "::1"
    assert peer_address("unix:/tmp/socket") is None


def test_the_server_refuses_calls_out_of_order_and_an_observation_past_its_size(tmp_path):
    import torch

    from policies.config import PolicyConfig
    from policies.factory import make_policy
    from trainer.server.policy_driver import PolicyDriver

    torch.manual_seed(0)
    driver = PolicyDriver(make_policy(SPEC, PolicyConfig(kind="mlp", hidden_sizes=[8])))
    server = LerobotPolicyServer(driver, LerobotMapping({}), "127.0.0.1", 0)

    async def main() -> tuple[grpc.StatusCode, grpc.StatusCode]:
        stop, started = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(server.run(stop, started))
        await started.wait()
        empty, part = MESSAGES["Empty"], MESSAGES["Observation"]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.bound_port}") as channel:
            get = channel.unary_unary(f"/{'transport.AsyncInference'}/GetActions",
                                      request_serializer=empty.SerializeToString, response_deserializer=MESSAGES["Actions"].FromString)  # fmt: skip
            send = channel.stream_unary("/transport.AsyncInference/SendObservations",
                                        request_serializer=part.SerializeToString, response_deserializer=empty.FromString)  # fmt: skip
            with pytest.raises(grpc.aio.AioRpcError) as early:
                await get(empty())
            await channel.unary_unary("/transport.AsyncInference/Ready", request_serializer=empty.SerializeToString,
                                      response_deserializer=empty.FromString)(empty())  # fmt: skip
            server.clients[next(iter(server.clients))].setup = wire.PolicySetup(
                "a", "b", ("a", "b", "c"), {}, 1, "cpu"
            )
            # One 2 MB part past the limit, no more: the server refuses with the part that crosses it,
            # and a client still writing tens of MB then would race that refusal's RST_STREAM (seen in
            # a CI run as INTERNAL instead of the server's RESOURCE_EXHAUSTED).
            count = max_observation_bytes(SPEC) // (2 << 20) + 1
            parts = [part(transfer_state=1 if i == 0 else 2, data=bytes(2 << 20)) for i in range(count)]
            with pytest.raises(grpc.aio.AioRpcError) as big:
                await send(iter(parts))
        stop.set()
        await task
        return early.value.code(), big.value.code(), big.value.details()

    early, big, details = asyncio.run(main())
    driver.close()
    assert early == grpc.StatusCode.FAILED_PRECONDITION
    assert big == grpc.StatusCode.RESOURCE_EXHAUSTED and "an observation is at most" in details


def test_the_serve_config_names_a_bad_lerobot_setting(tmp_path):
    from policies.config import PolicyConfig
    from policies.factory import make_policy
    from trainer.configs.errors import ConfigError
    from trainer.server.config import load_serve_config

    make_policy(SPEC, PolicyConfig(kind="mlp", hidden_sizes=[8])).save(tmp_path / "policy")
    with pytest.raises(ConfigError, match=r"lerobot\.allowed_peers: .lab. is not an address"):
        load_serve_config(
            None,
            ["server.mode=eval", f"eval.policy_path={tmp_path / 'policy'}", "lerobot.allowed_peers=[lab]"],
        )
    with pytest.raises(ConfigError, match=r"lerobot\.port serves eval\.policy_path"):
        load_serve_config(None, ["lerobot.port=8080"])


def test_a_robot_standing_still_is_answered_again_after_the_queue_timeout():
    """LeRobot's rule skips a state that did not move unless ``must_go``; a robot whose one
    ``must_go`` observation went unanswered would otherwise starve."""
    import time

    import torch

    from policies.config import PolicyConfig
    from policies.factory import make_policy
    from trainer.server.lerobot_server import RobotClientState
    from trainer.server.policy_driver import PolicyDriver

    torch.manual_seed(0)
    driver = PolicyDriver(make_policy(SPEC, PolicyConfig(kind="mlp", hidden_sizes=[8])))
    server = LerobotPolicyServer(driver, LerobotMapping({}), "127.0.0.1", 0, obs_queue_timeout_s=2.0)
    still = np.zeros(3, np.float32)
    state = RobotClientState(last_state=still, answered_s=time.monotonic())
    state.answered_steps.append(4)
    same_step = wire.TimedObservation(0.0, 4, {}, must_go=False)
    new_step = wire.TimedObservation(0.0, 5, {}, must_go=False)
    assert not server._worth_answering(state, same_step, still)  # LeRobot's rule: answered already
    assert not server._worth_answering(state, new_step, still + 0.1)  # moved less than the tolerance
    assert server._worth_answering(state, new_step, still + 2.0)
    assert server._worth_answering(state, wire.TimedObservation(0.0, 4, {}, must_go=True), still)
    state.answered_s -= 2.5  # no chunk for longer than the queue timeout
    assert server._worth_answering(state, same_step, still)
    driver.close()
