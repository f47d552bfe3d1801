"""The agent keeps the host's cores out of idle states while it runs, and only then: its PM QoS
request (default) and its idle-priority busy loops (``spin_idle_cores``)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robot_agent.agent import Agent, AgentThread
from robot_agent.config import AgentConfig, LinkConfig
from robot_agent.core_wake import PM_QOS_FILE, IdleCoreSpinners, IdleStateLimit, current_limit_us
from robot_agent.drivers import make_driver

needs_pm_qos = pytest.mark.skipif(
    not os.access(PM_QOS_FILE, os.W_OK), reason=f"{PM_QOS_FILE} is not writable here (needs Linux and root)"
)


def requests_held_here() -> int:
    """How many PM QoS requests this process holds (open descriptors of the file). Other processes'
    requests (another test worker's agents) change the kernel's value, not this count."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == str(PM_QOS_FILE))


@needs_pm_qos
def test_the_limit_holds_while_open_and_drops_on_release():
    before = requests_held_here()
    with IdleStateLimit(0) as limit:
        assert limit.held
        assert current_limit_us() == 0
        assert requests_held_here() == before + 1
    assert requests_held_here() == before


def test_no_permission_logs_one_warning_and_the_agent_goes_on(tmp_path, caplog):
    limit = IdleStateLimit(0, path=tmp_path / "no" / "cpu_dma_latency")
    with caplog.at_level(logging.WARNING, logger="robot_agent.core_wake"):
        assert limit.hold() is False
    assert not limit.held
    assert "keep_cores_awake = false" in caplog.text
    limit.release()  # nothing held: a no-op


def test_a_negative_latency_is_refused():
    with pytest.raises(ValueError, match="max_exit_latency_us"):
        IdleStateLimit(-1)


@needs_pm_qos
@pytest.mark.parametrize("keep_cores_awake", [True, False])
def test_the_agent_holds_the_limit_while_it_runs_and_releases_it_on_stop(tmp_path, keep_cores_awake):
    before = requests_held_here()
    config = AgentConfig(
        spool_dir=str(tmp_path),
        keep_cores_awake=keep_cores_awake,
        # No trainer listens here: the agent runs, holds the robot and retries the link.
        link=LinkConfig(server="127.0.0.1:9", insecure=True, reconnect_max_s=0.2),
    )
    driver = make_driver("sim-twin", {"task": "reach", "control_hz": 20.0})
    agent = AgentThread(Agent(driver, config)).start()
    try:
        expected = before + (1 if keep_cores_awake else 0)
        deadline = time.monotonic() + 10.0  # the agent takes the limit as its run starts
        while requests_held_here() != expected and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # and keeps it (or never takes it) while it runs
        assert agent.is_alive()
        assert requests_held_here() == expected
        if keep_cores_awake:
            assert current_limit_us() == 0
    finally:
        agent.stop()
    assert not agent.is_alive()
    assert requests_held_here() == before


def test_spinners_run_at_idle_priority_one_pinned_to_each_core_until_released():
    spinners = IdleCoreSpinners()
    assert spinners.hold()
    try:
        pids = [proc.pid for proc in spinners._procs]
        cores = sorted(os.sched_getaffinity(0))
        assert len(pids) == len(cores)
        deadline = time.monotonic() + 10.0  # each sets its policy and core as it starts
        while time.monotonic() < deadline:
            policies = [os.sched_getscheduler(pid) for pid in pids]
            affinities = [sorted(os.sched_getaffinity(pid)) for pid in pids]
            if policies == [os.SCHED_IDLE] * len(pids) and affinities == [[c] for c in cores]:
                break
            time.sleep(0.05)
        assert policies == [os.SCHED_IDLE] * len(pids)
        assert affinities == [[c] for c in cores]
        assert all(proc.poll() is None for proc in spinners._procs)
    finally:
        procs = list(spinners._procs)
        spinners.release()
    assert not spinners.held
    assert all(proc.returncode is not None for proc in procs)


def test_spinners_exit_when_their_agent_is_killed():
    # A process holds spinners and then dies without releasing them (as under SIGKILL).
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys, time\nfrom robot_agent.core_wake import IdleCoreSpinners\n"
         "s = IdleCoreSpinners(); s.hold()\nprint(' '.join(str(p.pid) for p in s._procs), flush=True)\n"
         "time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    pids = [int(pid) for pid in holder.stdout.readline().split()]
    assert pids and all(Path(f"/proc/{pid}").exists() for pid in pids)
    holder.kill()
    holder.wait()
    deadline = time.monotonic() + 10.0
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its (re-)parent to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def spinners_of_this_process() -> list[int]:
    """Pids of this process's children that run the spinner loop."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            ppid = int((proc / "stat").read_text().rsplit(") ", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"SCHED_IDLE" in cmdline:
            pids.append(int(proc.name))
    return pids


def test_an_agent_with_spin_idle_cores_spins_while_it_runs_and_not_after(tmp_path):
    config = AgentConfig(
        spool_dir=str(tmp_path),
        keep_cores_awake=False,
        spin_idle_cores=True,
        link=LinkConfig(server="127.0.0.1:9", insecure=True, reconnect_max_s=0.2),
    )
    agent = AgentThread(Agent(make_driver("sim-twin", {"task": "reach", "control_hz": 20.0}), config)).start()
    try:
        deadline = time.monotonic() + 10.0
        while len(spinners_of_this_process()) < len(os.sched_getaffinity(0)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(spinners_of_this_process()) == len(os.sched_getaffinity(0))
    finally:
        agent.stop()
    assert spinners_of_this_process() == []
