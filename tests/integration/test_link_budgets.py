"""Hardening, second round: a robot holding a valid credential must not stall the trainer, starve the
other robots, lock them out or poison the shared dataset. Each test is one finding of the
adversarial pass (issue 61), against a real link server on loopback and clients written from
``robot_link.proto``; an honest sim-twin agent runs beside the attackers where it matters."""

from __future__ import annotations

import ctypes
import gc
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import simplejpeg

from protos import field_limits, link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
from protos.episode_frames import features_of
from tests.integration.link_harness import NO_PENALTY, TWIN, RawClient, start_agent, wait_until
from tests.integration.test_link_hardening import observation, register, small_spec, transition
from trainer.server.admission import transport_limit
from trainer.server.auth import ServerAuthConfig
from trainer.server.episodes import RobotEpisode
from trainer.server.link_budgets import LinkLimits
from trainer.server.link_server import LinkServer, LinkServerConfig, LinkServerThread
from trainer.server.recorder import LeRobotEpisodeSink

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def serve(
    limits: LinkLimits | None = None,
    sink=None,
    token: str | None = None,
    max_message_bytes: int | None = None,
) -> LinkServerThread:
    auth = ServerAuthConfig(insecure=True, token=token)
    config = LinkServerConfig(host="127.0.0.1", port=0, auth=auth, limits=limits or LinkLimits(),
                              max_message_bytes=max_message_bytes or link_codec.MAX_MESSAGE_BYTES)  # fmt: skip
    return LinkServerThread(LinkServer(config, sink=sink)).start()


@pytest.fixture
def server():
    served = serve(NO_PENALTY)
    yield served
    served.stop()


def ended(port: int, *messages: pb.AgentMessage) -> tuple[grpc.StatusCode, str]:
    client = RawClient(port).send(*messages)
    try:
        return client.ended(), client.details
    finally:
        client.close()


def rss_mb() -> float:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


# -- 1. a size for every field --------------------------------------------------------------------
def test_oversized_fields_inside_well_formed_messages_are_refused_naming_the_field(server, caplog):
    port = server.server.port
    huge_instruction = observation(1, 0, instruction="x" * (8 << 20))
    huge_reason = observation(1, 0, codec_reason="r" * (8 << 20))
    many_events = observation(1, 1, transition=transition(safety_events=[f"e{i}" for i in range(100_000)]))
    small_events = observation(1, 1, transition=transition(safety_events=[f"e{i}" for i in range(40)]))
    long_id = observation(1, 0, episode_id="i" * (4 << 20))
    long_end = pb.AgentMessage(
        episode_event=pb.EpisodeEvent(kind=pb.EpisodeEvent.ENDED, episode_id="e" * 200)
    )
    long_error = pb.AgentMessage(error=pb.AgentError(code="bad", message="m" * 4096))
    with caplog.at_level(logging.INFO):
        for bad, field in (
            (huge_instruction, "observation.instruction has 8388608 bytes, over the limit of 4096"),
            (huge_reason, "observation.codec_reason has 8388608 bytes, over the limit of 512"),
            (
                many_events,
                "observation.transition.safety_events has more than 9999 items, over the limit of 32",
            ),
            (long_id, "observation.episode_id has 4194304 bytes, over the limit of 128"),
            (small_events, "observation.transition.safety_events has 40 items, over the limit of 32"),
            (long_end, "episode_event.episode_id has 200 characters"),
            (long_error, "error.message has 4096 characters"),
        ):
            code, details = ended(port, register(), bad)
            assert code == grpc.StatusCode.INVALID_ARGUMENT and field in details, details
        # In a registration too, before anything of it is used.
        code, details = ended(port, register(robot_kind="k" * 1000))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "register.robot_kind has 1000" in details
    logged = sum(len(r.getMessage()) for r in caplog.records)
    assert logged < 20_000, f"the log took {logged} characters of robot-sent text"
    assert not server.server.sessions or all(
        s.state == "disconnected" for s in server.server.sessions.values()
    )


def test_robot_sent_text_is_logged_within_a_budget_per_session(server, caplog):
    """An agent that sends a codec note with every observation gets a burst of log lines, not one each."""
    messages = [register()] + [observation(i, 0, codec_reason=f"note {i}") for i in range(1, 301)]
    client = RawClient(server.server.port).send(*messages)
    with caplog.at_level(logging.INFO):
        wait_until(lambda: "hostile" in server.server.sessions
                   and server.server.sessions["hostile"].stats.observations == 300, what="300 observations")  # fmt: skip
        client.close()
    notes = [r for r in caplog.records if "frames: 'note" in r.getMessage()]
    assert 1 <= len(notes) <= LinkLimits().log_lines_burst + 2, len(notes)


def test_the_counted_safety_events_of_a_session_stay_bounded(server):
    """Unique event strings (32 per step, within their size) are counted in a bounded table."""
    messages = [register(), observation(1, 0)]
    for step in range(1, 6):
        events = [f"made-up:{step}:{i}" for i in range(32)]
        messages.append(observation(1 + step, step, transition=transition(safety_events=events)))
    client = RawClient(server.server.port).send(*messages)
    wait_until(lambda: "hostile" in server.server.sessions
               and server.server.sessions["hostile"].stats.observations == 6, what="the observations")  # fmt: skip
    counts = server.server.sessions["hostile"].stats.safety_events
    assert len(counts) <= 65 and counts["other"] == 5 * 32 - 64
    client.close()


# -- 2. memory that comes back --------------------------------------------------------------------
def test_memory_comes_back_after_refused_large_registrations(server):
    spec = small_spec()
    spec.instruction = "x" * (20 << 20)  # a 20 MB registration, refused for its instruction
    ended(server.server.port, register("warm-up", spec))
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = rss_mb()
    for i in range(40):
        code, details = ended(server.server.port, register(f"big-{i}", spec))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "instruction has 20971520" in details
    growth = rss_mb() - before
    # Before the fix each refusal left about 17 MB behind (680 MB for 40).
    assert growth < 120, f"RSS grew {growth:.0f} MB over 40 refused 20 MB registrations"


# -- 3. caps on sessions, deadlines for the unregistered ------------------------------------------
def test_sessions_per_credential_are_capped_and_the_refusal_says_when_to_retry():
    served = serve(LinkLimits(max_sessions_per_credential=4), token="lab-token-0123456789")
    port = served.server.port
    clients = []
    try:
        for i in range(4):
            client = RawClient(port, token="lab-token-0123456789").send(register(f"robot-{i}"))
            clients.append(client)
        wait_until(lambda: len(served.server.sessions) == 4, what="4 sessions")
        extra = RawClient(port, token="lab-token-0123456789").send(register("robot-4"))
        assert extra.ended() == grpc.StatusCode.RESOURCE_EXHAUSTED, extra.details
        assert "sessions on this credential" in extra.details
        assert float(extra.trailing[link_codec.RETRY_AFTER_KEY]) > 0
        extra.close()
        clients.pop().close()  # one robot leaves: its slot is free again
        wait_until(lambda: served.server.counter.open[""] == 3, what="the slot to free")
        again = RawClient(port, token="lab-token-0123456789").send(register("robot-5"))
        wait_until(lambda: "robot-5" in served.server.sessions, what="robot-5 admitted")
        again.close()
    finally:
        for client in clients:
            client.close()
        served.stop()


def test_a_busy_trainer_is_retried_not_given_up_on(tmp_path):
    """An agent refused for a full session cap keeps trying and gets in once a slot frees."""
    served = serve(LinkLimits(max_sessions_per_peer=1, busy_retry_after_s=0.5))
    squatter = RawClient(served.server.port).send(register("squatter"))
    wait_until(lambda: "squatter" in served.server.sessions, what="the squatter")
    agent = start_agent(served.server.port, tmp_path / "spool", reconnect_max_s=0.2)
    try:
        wait_until(lambda: served.server.refused >= 1, what="a refusal")
        time.sleep(1.0)
        assert agent._thread.is_alive(), "the agent gave up on a busy trainer"
        squatter.close()
        wait_until(lambda: "twin-0" in served.server.sessions, timeout=30, what="the agent to get in")
    finally:
        agent.stop()
        served.stop()


def test_connections_that_never_register_or_never_speak_are_closed():
    served = serve(LinkLimits(register_timeout_s=0.5, handshake_timeout_s=0.5))
    try:
        silent = RawClient(served.server.port)  # opens the stream, never registers
        assert silent.ended(10) == grpc.StatusCode.INVALID_ARGUMENT
        assert "no registration within 0.5 s" in silent.details
        silent.close()
        sockets = [socket.create_connection(("127.0.0.1", served.server.port)) for _ in range(20)]
        time.sleep(1.5)
        closed = 0
        for sock in sockets:  # the server said goodbye (GOAWAY) and closed them: reads end with nothing
            sock.settimeout(2.0)
            try:
                while sock.recv(4096):
                    pass
                closed += 1
            except ConnectionResetError:
                closed += 1
            except TimeoutError:
                pass  # still open
            finally:
                sock.close()
        assert closed == 20
    finally:
        served.stop()


# -- 4. fair service --------------------------------------------------------------------------------
@pytest.mark.parametrize("attack", ["malformed", "oversized"])
def test_an_honest_robot_does_not_hold_while_others_flood_the_trainer(attack, tmp_path):
    """Four sessions from another process (benchmarks/link_fairness.py's attackers) reconnect and send
    bad frames or 8 MB instructions as fast as they can; the honest twin never misses a tick. The link
    is sized by the run's schema (the twin's), as serve sizes it.

    Here the server, the honest agent and pytest share one process and two cores with whatever else
    the host runs, so one stall of the whole process (the host's, not the server's) can miss a tick:
    a phase that held is run once more, and the robot must get through one whole phase unheld. A
    server that starves the honest robot holds it in both (the benchmark measures it in separate
    processes)."""
    served = serve(max_message_bytes=transport_limit(twin_spec_features()))
    honest = start_agent(served.server.port, tmp_path / "spool", driver={"max_episode_steps": 2000})
    try:
        wait_until(lambda: "twin-0" in served.server.sessions, what="the honest robot")
        session = served.server.sessions["twin-0"]
        first = _attack_phase(attack, served, session, honest)
        if first:
            second = _attack_phase(attack, served, session, honest)
            assert not second, (
                f"the honest robot held under the {attack} attack in two phases running: "
                f"{len(first)} and {len(second)} times"
            )
    finally:
        honest.stop()
        served.stop()


def _attack_phase(attack: str, served, session, honest) -> list[float]:
    """Drive the honest robot for 80 ticks (4 s at 20 Hz) while the attack runs; when it held."""
    attackers = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "link_fairness.py"), "--attack", attack,
         "--port", str(served.server.port), "--seconds", "6"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        time.sleep(1.0)
        started = time.monotonic()
        served.call(_drive(session, 80), timeout=60)
        answered = time.monotonic()
        attackers.wait(60)
        opened = json.loads(attackers.stdout.read().strip().splitlines()[-1])["sessions_opened"]
        assert opened >= 4, "the attack did not run"
    finally:
        if attackers.poll() is None:
            attackers.kill()
    return [t for t, _, _ in honest.agent.control.stats.holds_entered if started + 0.5 < t < answered - 0.1]


async def _drive(session, steps: int) -> None:
    from tests.integration.link_harness import answer_episode

    await answer_episode(session, steps, lambda i, obs: [[0.0] * 6 + [1.0]])


def test_a_message_past_the_runs_schema_is_refused_by_grpc_before_python_reads_it(caplog):
    """An 8 MB observation costs the shared loop ~20 ms to copy into Python: with the run's schema
    known, gRPC refuses it from its length prefix and the link server never sees it."""
    limit = transport_limit(twin_spec_features())
    assert field_limits.UPLOAD_PART_BYTES < limit < 5 << 20  # an upload part and a twin observation
    assert transport_limit(None) == link_codec.MAX_MESSAGE_BYTES  # schema unknown: the link's limit
    served = serve(NO_PENALTY, max_message_bytes=limit)
    try:
        with caplog.at_level(logging.INFO):
            code, details = ended(
                served.server.port, register(), observation(1, 0, instruction="x" * (8 << 20))
            )
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and f"vs. {limit}" in details, details
        assert not [r for r in caplog.records if "sent a bad message" in r.getMessage()]  # never parsed
        assert ended(served.server.port, register("small"), observation(1, 0, instruction="x" * 5000))[0] == (
            grpc.StatusCode.INVALID_ARGUMENT  # within the transport's limit: parsed and named as before
        )
    finally:
        served.stop()


def test_what_start_up_built_is_out_of_the_collectors_walk():
    """A full collection over torch's, the policy's and gRPC's objects stopped the loop 30-110 ms."""
    served = serve()
    try:
        assert gc.get_freeze_count() > 10_000
    finally:
        served.stop()


def test_serve_sizes_the_link_by_the_runs_schema(tmp_path):
    from trainer.server.config import load_serve_config
    from trainer.server.link_hosting import HostedLink

    spec = small_spec()
    (tmp_path / "spec.json").write_text(json.dumps(link_codec.spec_from_proto(spec).to_dict()))
    config = load_serve_config(None, ["server.insecure=true", "server.port=0", f"data.record_dir={tmp_path / 'ds'}",
                                      f"log_dir={tmp_path / 'tb'}", f"data.features={tmp_path / 'spec.json'}"])  # fmt: skip
    with HostedLink(config) as hosted:
        limit = hosted.server.config.max_message_bytes
    assert limit == transport_limit(features_of(link_codec.spec_from_proto(spec))) and limit < 5 << 20


# -- 5. the dataset's schema is the run's ---------------------------------------------------------
def twin_spec_features() -> dict:
    """The features of the honest twin's episodes (what the run records)."""
    from robot_agent.config import AgentConfig
    from robot_agent.control_loop import spec_sent
    from robot_agent.drivers import make_driver

    driver = make_driver("sim-twin", {**TWIN, "max_episode_steps": 5})
    try:
        return features_of(spec_sent(driver.spec, AgentConfig()))
    finally:
        driver.close()


def test_a_hostile_first_robot_cannot_take_the_datasets_schema(tmp_path):
    sink = LeRobotEpisodeSink(str(tmp_path / "dataset"), features=twin_spec_features())
    served = serve(sink=sink)
    try:
        huge = small_spec()
        huge.cameras[0].height = huge.cameras[0].width = 1024
        code, details = ended(served.server.port, register("first", huge), observation(1, 0))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "does not fit the dataset" in details
        honest = start_agent(served.server.port, tmp_path / "spool", driver={"max_episode_steps": 5})
        try:
            wait_until(lambda: "twin-0" in served.server.sessions, what="the honest twin")
            session = served.server.sessions["twin-0"]
            served.call(_drive(session, 6), timeout=60)
            wait_until(lambda: session.stats.episodes_stored >= 1, timeout=60, what="its episode stored")
        finally:
            honest.stop()
    finally:
        served.stop()


# -- 6. values within declared bounds --------------------------------------------------------------
def test_absurd_finite_values_are_refused_at_the_step(server):
    port = server.server.port
    code, details = ended(port, register(), observation(1, 0, state=(3e38, 0.0, 0.3)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "state[0] (tcp_pos.0) = 3e+38 is outside its declared bounds [-100, 100]" in details
    code, details = ended(port, register(), observation(1, 1, transition=transition(reward=-3e38)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "reward_range" in details
    # A robot may declare its own bounds: the same 150 then passes.
    wide = small_spec()
    wide.state_fields[0].low, wide.state_fields[0].high = -200.0, 200.0
    client = RawClient(port).send(register("wide", wide), observation(1, 0, state=(150.0, 0.0, 0.3)))
    wait_until(lambda: "wide" in server.server.sessions and server.server.sessions["wide"].stats.observations == 1,
               what="the in-bounds observation")  # fmt: skip
    client.close()


def test_a_refused_episode_of_truncated_jpegs_leaves_no_staging_folder(tmp_path):
    root = tmp_path / "dataset"
    sink = LeRobotEpisodeSink(str(root))
    spec = EnvSpec("jpeg", (CameraSpec("front", 16, 16, 10.0),), (StateField("tcp_pos", 3),),
                   ee_delta_action_space(), 10.0, "", 5)  # fmt: skip
    good = simplejpeg.encode_jpeg(np.full((16, 16, 3), 80, np.uint8), quality=90)
    frames = [pb.Frame(camera="front", codec=pb.CODEC_JPEG, height=16, width=16, data=good[: len(good) // 2])]
    observations = [
        pb.Observation(
            seq=i,
            episode_id="ep",
            step=i,
            state=[0.5, 0.0, 0.3],
            frames=frames,
            transition=pb.Transition(executed_action=[0.0] * 7) if i else None,
        )
        for i in range(3)
    ]
    end = pb.EpisodeEvent(kind=pb.EpisodeEvent.ENDED, episode_id="ep", num_steps=2)
    with pytest.raises((link_codec.LinkCodecError, ValueError)):
        sink.store(RobotEpisode("r", spec, observations, end))
    staging = root / ".staging"
    assert not staging.exists() or not any(staging.iterdir())


# -- 7. robot ids ------------------------------------------------------------------------------------
def test_look_alike_robot_ids_are_refused(server):
    port = server.server.port
    client = RawClient(port).send(register("Honest-A"))
    wait_until(lambda: "Honest-A" in server.server.sessions, what="Honest-A")
    code, details = ended(port, register("honest-a"))
    assert code == grpc.StatusCode.ALREADY_EXISTS and "differs only in case" in details
    for look_alike in ("Honest-A ", "Honest-\u0430", "Honest-A\0", "", "-leading", "a" * 65):
        code, details = ended(port, register(look_alike))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (look_alike, code, details)
        assert "robot id" in details or "robot_id" in details
    client.close()
    assert field_limits.robot_id_problem("franka-left_2.lab") is None


def test_robots_that_connect_once_and_leave_are_not_kept_forever(server):
    """Every loop over the sessions (the console, admission) walked every id ever seen: an attacker
    reconnecting under fresh ids made them slower each second."""
    from trainer.server.link_server import GONE_ROBOTS_KEPT

    for i in range(GONE_ROBOTS_KEPT + 40):
        client = RawClient(server.server.port).send(register(f"once-{i}"))
        wait_until(lambda i=i: f"once-{i}" in server.server.sessions, what=f"once-{i}")
        client.close()
        wait_until(
            lambda i=i: server.server.sessions[f"once-{i}"].state == "disconnected", what="its leaving"
        )
    client = RawClient(server.server.port).send(register("last"))
    wait_until(lambda: "last" in server.server.sessions, what="the last robot")
    assert len(server.server.sessions) <= GONE_ROBOTS_KEPT + 1
    assert len(server.server.assemblers) <= GONE_ROBOTS_KEPT + 1
    client.close()
