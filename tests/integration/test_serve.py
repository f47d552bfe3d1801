"""``rlinf-trainer serve`` (collect mode) with real agents on the MuJoCo twin: recording and faults."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pytest
import torch

from protos import robot_link_pb2 as pb
from protos import robot_link_pb2_grpc as pb_grpc
from robot_agent.teleop import make_teleop
from tests.integration.link_harness import start_agent, wait_until
from trainer.server.config import load_serve_config
from trainer.server.serve import serve

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SHORT = {"max_episode_steps": 20}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServeThread:
    """``serve()`` in its own thread, as ``rlinf-trainer serve`` runs it in the main one."""

    def __init__(self, tmp_path: Path, *overrides: str) -> None:
        self.config = load_serve_config(
            None,
            [
                "server.insecure=true",
                "server.host=127.0.0.1",
                "server.port=0",
                f"data.record_dir={tmp_path / 'ds'}",
                f"log_dir={tmp_path / 'tb'}",
                *overrides,
            ],
        )
        self.server = None
        self.stop_event = threading.Event()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        assert self._started.wait(30), "serve did not start"

    def _main(self) -> None:
        def started(server) -> None:
            self.server = server
            self._started.set()

        serve(self.config, self.stop_event, on_started=started)

    def stop(self) -> None:
        self.stop_event.set()
        self._thread.join(30)


def dataset(root: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    info = json.loads((root / "meta" / "info.json").read_text())
    episodes = pd.read_parquet(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    frames = pd.concat(pd.read_parquet(p) for p in sorted((root / "data").rglob("*.parquet")))
    return info, episodes, frames


def collect_from_two_twins(
    tmp_path: Path,
    episodes_each: int,
    *overrides: str,
    teleop: str = "",
    steps: int = SHORT["max_episode_steps"],
):
    """Two twin agents (each with its own ``always`` expert device if ``teleop``) into one collect server."""
    served = ServeThread(tmp_path, f"collect.episodes_per_robot={episodes_each}", *overrides)
    agents = [
        start_agent(served.server.port, tmp_path / f"spool{i}", robot_id=f"twin-{i}", driver={**SHORT, "max_episode_steps": steps},
                    teleop=make_teleop(teleop, {"mode": "always"}) if teleop else None)
        for i in range(2)
    ]  # fmt: skip
    try:
        wait_until(lambda: sum(s.stats.episodes_stored for s in served.server.sessions.values()) >= 2 * episodes_each,
                   timeout=120, what=f"{2 * episodes_each} recorded episodes")  # fmt: skip
    finally:
        for agent in agents:
            agent.stop()
        served.stop()
    return dataset(tmp_path / "ds")


def test_two_agents_stream_and_record_five_episodes_each(tmp_path):
    info, episodes, frames = collect_from_two_twins(tmp_path, 5)
    assert info["total_episodes"] == 10 and info["fps"] == 20.0
    assert sorted(episodes["source"].value_counts().tolist()) == [5, 5]
    assert set(episodes["source"]) == {"robot:twin-0", "robot:twin-1"}
    assert episodes["episode_id"].is_unique and not episodes["aborted"].any()
    assert episodes["length"].tolist() == [20] * 10 and len(frames) == 200
    assert frames["index"].tolist() == list(range(200))
    # Every episode has a seed of its own, on either robot: no two play the same random actions.
    first_actions = frames.groupby("episode_index")["action"].first()
    assert len({tuple(np.round(a, 6)) for a in first_actions}) == 10
    assert {"action", "complementary_info.policy_action", "intervention", "next.reward"} <= set(
        frames.columns
    )
    video = tmp_path / "ds" / "videos" / "observation.images.wrist" / "chunk-000" / "file-009.mp4"
    with av.open(str(video)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 20


def test_collect_centralises_teleoperated_demonstrations_from_two_robots(tmp_path):
    """Each robot's device drives every tick (the twin's expert stands in for a person); the trainer
    holds the arm still and records both robots' demonstrations, flagged as human, in one dataset."""
    # 2 s episodes: the safety filter's lead keeps the twin's arm near 0.15 m/s.
    _, episodes, frames = collect_from_two_twins(
        tmp_path, 2, "collect.policy=hold", teleop="expert", steps=40
    )
    assert sorted(episodes["source"]) == ["robot:twin-0"] * 2 + ["robot:twin-1"] * 2
    assert frames["intervention"].all() and len(frames) == 4 * 40
    human, executed = (
        np.stack(frames["complementary_info.human_action"].to_numpy()),
        np.stack(frames["action"].to_numpy()),
    )
    # What ran is the human's action through the agent's safety: the same direction, never longer.
    shortened = np.linalg.norm(executed[:, :3], axis=1) / np.maximum(
        np.linalg.norm(human[:, :3], axis=1), 1e-9
    )
    np.testing.assert_allclose(executed[:, :3], human[:, :3] * shortened[:, None], atol=1e-5)
    assert (shortened <= 1 + 1e-5).all() and (shortened < 0.9).any()  # far from the goal the step is capped
    np.testing.assert_allclose(executed[:, 3:], human[:, 3:], atol=1e-5)
    hold = np.zeros(executed.shape[1], np.float32)
    hold[-1] = 1.0
    np.testing.assert_array_equal(
        np.stack(frames["complementary_info.policy_action"].to_numpy()), np.tile(hold, (len(frames), 1))
    )
    assert frames.groupby("episode_index")["next.success"].any().mean() >= 0.5  # the demos reach the goal


def test_a_killed_and_restarted_server_loses_no_acknowledged_episode(tmp_path):
    port = free_port()
    command = [
        sys.executable, "-m", "trainer.cli", "serve", "--insecure", "server.host=127.0.0.1", f"server.port={port}",
        f"data.record_dir={tmp_path / 'ds'}", f"log_dir={tmp_path / 'tb'}",
    ]  # fmt: skip
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115
    trainer = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    agent = start_agent(port, tmp_path / "spool", driver=SHORT, reconnect_max_s=0.3)
    finished: list[str] = []
    original_finish = agent.agent.spool.finish

    def remember(episode_id, end):
        finished.append(episode_id)
        original_finish(episode_id, end)

    agent.agent.spool.finish = remember
    try:
        wait_until(lambda: len(finished) >= 3, timeout=120, what="three finished episodes")
        time.sleep(0.4)  # the next episode is under way
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait()
        trainer = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: len(finished) >= 6, timeout=120, what="episodes after the restart")
        wait_until(lambda: agent.agent.spool.pending() == [], timeout=60, what="the spool to drain")
        trainer.send_signal(signal.SIGTERM)
        assert trainer.wait(60) == 0
    finally:
        agent.stop()
        if trainer.poll() is None:
            trainer.kill()
    info, episodes, frames = dataset(tmp_path / "ds")
    assert episodes["episode_id"].is_unique
    # Every episode the agent finished was acknowledged only once it was in the dataset.
    recorded = set(episodes["episode_id"])
    assert set(finished) <= recorded | set(agent.agent.spool.pending())
    assert episodes["aborted"].any()  # the one cut by the kill, replayed from the spool
    assert info["total_frames"] == len(frames) == episodes["length"].sum()


def test_garbage_on_the_port_is_refused_and_other_robots_keep_streaming(tmp_path):
    served = ServeThread(tmp_path)
    port = served.server.port
    agent = start_agent(port, tmp_path / "spool", driver=SHORT)
    try:
        wait_until(lambda: "twin-0" in served.server.sessions, what="the good robot")
        session = served.server.sessions["twin-0"]
        # Random bytes straight onto the socket.
        with socket.create_connection(("127.0.0.1", port)) as raw:
            raw.sendall(os.urandom(4096))
        import grpc

        with grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]
        ) as ch:
            stub = pb_grpc.RobotLinkStub(ch)
            # A session that does not start with a registration.
            with pytest.raises(grpc.RpcError) as wrong:
                list(stub.Session(iter([pb.AgentMessage(error=pb.AgentError(code="x"))]), timeout=10))
            assert wrong.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            # A message over the size limit.
            huge = pb.AgentMessage(observation=pb.Observation(frames=[pb.Frame(data=b"\0" * (40 << 20))]))
            with pytest.raises(grpc.RpcError) as big:
                list(stub.Session(iter([huge]), timeout=10))
            assert big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # A registration with a broken env spec.
            bad = pb.Register(robot_id="bad", protocol_version=1, spec=pb.EnvSpec(name="x", control_hz=-1))
            with pytest.raises(grpc.RpcError) as spec:
                list(stub.Session(iter([pb.AgentMessage(register=bad)]), timeout=10))
            assert spec.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        before = session.stats.observations
        time.sleep(1.0)
        assert session.stats.observations > before + 10  # the good robot streamed on at 20 Hz
        assert session.state != "disconnected" and "bad" not in served.server.sessions
    finally:
        agent.stop()
        served.stop()


def test_a_killed_agent_is_aborted_the_other_continues_and_its_spool_replays_once(tmp_path):
    served = ServeThread(tmp_path)
    port = served.server.port
    config = tmp_path / "robot.json"
    config.write_text(json.dumps({"driver": {"task": "reach", "control_hz": 20.0, "image_size": 64, **SHORT},
                                  "agent": {"robot_id": "victim"}}))  # fmt: skip
    command = [
        str(Path(sys.executable).with_name("rlinf-robot")), "connect", "--server", f"127.0.0.1:{port}",
        "--robot", "sim-twin", "--insecure", "--robot-config", str(config), "--spool-dir", str(tmp_path / "spool"),
    ]  # fmt: skip
    survivor = start_agent(port, tmp_path / "survivor", robot_id="survivor", driver=SHORT)
    victim = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: "victim" in served.server.sessions, timeout=60, what="the victim")
        victim_session = served.server.sessions["victim"]
        wait_until(lambda: victim_session.stats.episodes_stored >= 1, timeout=60, what="a victim episode")
        # Well inside an episode (not at the boundary, where the newest step is the last one's end),
        # and a step past the 5 checked below: raw frames to this host go by the frame ring (the
        # default codec, auto), and such a step is spooled once the trainer has answered it, so a
        # kill may take the newest one with it.
        wait_until(
            lambda: victim_session.latest is not None and 6 <= victim_session.latest.step <= 12,
            what="mid-episode",
        )
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        wait_until(lambda: victim_session.state == "disconnected", timeout=10, what="the server to notice")
        survivor_before = served.server.sessions["survivor"].stats.episodes_stored
        wait_until(lambda: served.server.sessions["survivor"].stats.episodes_stored >= survivor_before + 2,
                   timeout=60, what="the survivor to carry on")  # fmt: skip
        # The restarted agent finds the cut episode in its spool, closes it as aborted and resends it.
        victim = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(
            lambda: served.server.sessions["victim"].state != "disconnected", timeout=60, what="the restart"
        )
        spooled = (
            tmp_path / "spool" / f"127.0.0.1_{served.server.port}" / "victim"
        )  # the spool of this trainer
        assert spooled.is_dir()
        wait_until(lambda: not list(spooled.glob("*/end.bin")), timeout=60,
                   what="the victim's spool to drain")  # fmt: skip
    finally:
        victim.kill()
        survivor.stop()
        served.stop()
    _, episodes, _ = dataset(tmp_path / "ds")
    assert episodes["episode_id"].is_unique
    cut = episodes[(episodes["source"] == "robot:victim") & episodes["aborted"]]
    assert len(cut) == 1 and cut["end_reason"].iloc[0] == "agent stopped mid-episode"
    assert cut["length"].iloc[0] >= 5
    assert (episodes["source"] == "robot:survivor").sum() >= 3


# Each policy's chunk must outlast its answer, or every chunk arrives stale and the robot holds. The
# look-alike VLA that decoded its chunk token by token took 70-100 ms a robot here, and replies took
# 320-370 ms with two robots on a loaded 2-core box: a chunk of 4 at 5 Hz leaves 800 ms.
CNN = {"kind": "cnn", "cameras": ["front"], "hidden_sizes": [32], "cnn_channels": [8]}
EVAL_POLICIES = {  # policy, control rate, the arm the twins stand in for
    "cnn": (CNN, 20.0, "panda"),
    "cnn-ur5e": (CNN, 20.0, "ur5e"),
    "vla": ({"kind": "vla", "cameras": ["front"], "chunk_size": 4}, 5.0, "panda"),  # tiny:openvla-oft
}


@pytest.mark.parametrize("kind", sorted(EVAL_POLICIES))
def test_eval_mode_runs_a_saved_policy_and_reports_success_statistics(tmp_path, kind, capsys):
    from policies.config import PolicyConfig
    from policies.factory import make_policy
    from robot_agent.drivers import make_driver

    policy_config, control_hz, arm = EVAL_POLICIES[kind]
    twin = {"task": "reach", "robot": arm, "control_hz": control_hz, "image_size": 64, **SHORT}
    driver = make_driver("sim-twin", twin)
    torch.manual_seed(0)  # some random inits answer one constant action greedily; this one does not
    policy = make_policy(driver.spec, PolicyConfig(**policy_config))
    driver.close()
    path = tmp_path / "policy"
    policy.save(path)
    served = ServeThread(
        tmp_path, "server.mode=eval", f"eval.policy_path={path}", "eval.episodes_per_robot=3", "eval.robots=2"
    )
    robots = ("twin-0", "twin-1")
    agents = [start_agent(served.server.port, tmp_path / r, robot_id=r, driver=twin) for r in robots]
    results = tmp_path / "tb" / "eval.json"

    def evaluated() -> bool:
        rows = json.loads(results.read_text())["robots"] if results.exists() else {}
        return all(rows.get(r, {}).get("episodes") == 3 for r in robots)

    try:
        wait_until(evaluated, timeout=120, what="three evaluated episodes on each robot")
        # Both robots (eval.robots=2) have played their episodes: serve ends by itself, with the results.
        served._thread.join(30)
        assert not served._thread.is_alive(), "serve kept serving after eval.robots were done"
    finally:
        for agent in agents:
            agent.stop()
        served.stop()
    printed = capsys.readouterr().out
    for robot in robots:
        record = json.loads(results.read_text())["robots"][robot]
        assert record["success_rate"] == record["successes"] / 3
        assert f"eval {robot}: {record['successes']}/3 successes" in printed, printed
    assert f"results in {results}" in printed
    info, episodes, frames = dataset(tmp_path / "ds")  # eval episodes are recorded too
    assert info["robot_type"] == {"panda": "franka", "ur5e": "ur5e"}[arm]
    assert len(episodes) == 6 and len(frames) == 120
    # Each robot has reset seeds of its own: the six episodes start from six different targets.
    first_states = frames.groupby("episode_index")["observation.state"].first()
    assert len({tuple(np.round(s, 5)) for s in first_states}) == 6
    # The recorded actions are the policy's (within its bounds), not the collect mode's random ones.
    executed = np.stack(frames["complementary_info.policy_action"].to_numpy())
    assert np.abs(executed).max() <= 1.0 and executed.std() > 0


def test_eval_tells_a_robot_its_policy_does_not_fit_and_the_robot_stops(tmp_path):
    from policies.config import PolicyConfig
    from policies.factory import make_policy
    from robot_agent.drivers import make_driver
    from robot_agent.link import LinkRefused

    reach = {"task": "reach", **SHORT}
    driver = make_driver("sim-twin", reach)
    make_policy(driver.spec, PolicyConfig(kind="mlp", hidden_sizes=(8,))).save(tmp_path / "policy")
    driver.close()
    served = ServeThread(tmp_path, "server.mode=eval", f"eval.policy_path={tmp_path / 'policy'}")
    pusher = start_agent(
        served.server.port, tmp_path / "spool", robot_id="pusher", driver={**SHORT, "task": "push"}
    )
    try:
        pusher.join(30)
        assert not pusher.is_alive(), "the robot kept holding, never told why"
        assert isinstance(pusher.error, LinkRefused), pusher.error
        assert "FAILED_PRECONDITION: eval: the policy does not fit: " in str(pusher.error)
    finally:
        pusher.stop()
        served.stop()


def test_a_dataset_that_cannot_be_written_stops_the_robots_once_and_their_episodes_stay_spooled(tmp_path):
    import shutil

    from robot_agent.link import LinkRefused

    served = ServeThread(tmp_path, "collect.episodes_per_robot=1")
    shutil.rmtree(tmp_path / "ds", ignore_errors=True)
    (tmp_path / "ds").write_text("the disk went bad")  # serve checked it at start; now nothing can be written
    first = start_agent(served.server.port, tmp_path / "spool", robot_id="first", driver=SHORT)
    try:
        first.join(60)
        assert not first.is_alive(), "the robot kept uploading into a broken dataset"
        assert isinstance(first.error, LinkRefused) and "cannot store episodes" in str(first.error), (
            first.error
        )
        assert "fix data.record_dir" in str(first.error)
        spooled = tmp_path / "spool" / f"127.0.0.1_{served.server.port}" / "first"
        assert len(list(spooled.glob("*/end.bin"))) == 1  # nothing lost: the episode waits for a good trainer
        # A robot that comes later is refused at once with the same reason, before it records anything.
        later = start_agent(served.server.port, tmp_path / "spool2", robot_id="later", driver=SHORT)
        later.join(30)
        assert isinstance(later.error, LinkRefused) and "cannot store episodes" in str(later.error)
    finally:
        first.stop()
        served.stop()


def test_bad_serve_configs_fail_at_start_with_the_key():
    from trainer.configs.errors import ConfigError

    for overrides, message in [
        (["server.mode=teleport"], "server.mode must be one of"),
        (["server.mode=eval"], "needs eval.policy_path"),
        (["collect.policy=dance"], "collect.policy must be one of"),
        (["server.frame_decode=tpu"], "server.frame_decode must be one of"),
        (["server.prot=1"], "server.prot"),
        (["eval.robots=-1"], "eval.robots must be >= 0"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_serve_config(None, overrides)


def test_serve_shows_the_live_robots_in_rerun(tmp_path):
    import rerun.chunk as rerun_chunk

    rrd = tmp_path / "live.rrd"
    collect_from_two_twins(tmp_path, 1, "server.view=rerun", f"server.view_save={rrd}")
    entities: dict[str, int] = {}
    for chunk in rerun_chunk.RrdReader(str(rrd)).stream().to_chunks():
        entities[str(chunk.entity_path)] = entities.get(str(chunk.entity_path), 0) + chunk.num_rows
    for robot in ("twin-0", "twin-1"):
        # Every observation of the episode (20 steps + the last) was shown: cameras, state and actions.
        assert (
            entities[f"/robots/{robot}/cameras/front"] >= 21
            and entities[f"/robots/{robot}/cameras/wrist"] >= 21
        )
        assert entities[f"/robots/{robot}/action"] >= 20 and f"/robots/{robot}/observation.state" in entities
