"""Simulator suites behind the env contract: step rate through our interface against the suite's
own env, and PPO success against wall time.

For each suite (ManiSkill3 PushCube-v1, MetaWorld reach-v3 and LIBERO libero_spatial task 0, each
in its own venv; gymnasium's Pendulum-v1 through the adapter),
with state only and, where the suite renders, one 128 px camera, the same random actions on
``--envs`` envs stepped one after another:
  * raw: the suite's own env (ManiSkill: ``gym.make`` of one CPU env; MetaWorld: its task class
    with ``set_task`` / ``reset`` / ``step``, plus a ``mujoco.Renderer`` for the camera; LIBERO: its
    ``ControlEnv`` with ``set_init_state`` at each reset, as its evaluations drive it; gymnasium:
    ``gym.make``), in one process;
  * adapter: our env class around it, in the same process;
  * vector: ``SimVectorEnv`` with one-step chunks: for a suite in its own venv, one subprocess worker
    started from that venv (the raw loop's compute) and two (as ``train`` runs on 2 cores), each
    pinned or not as ``train`` chooses; with ``--pinning``, each pinned to free cores and unpinned
    (``_unpinned``) instead (two more sets of workers); for an env of the main venv, the inline
    backend. The target: vector keeps >= 0.85 of raw;
  * raw_vector (gymnasium only): gymnasium's own ``SyncVectorEnv`` of the same envs, the vector a
    gymnasium user would reach for: what stepping ``--envs`` envs one by one in Python costs there.
Every path runs one schedule: a reset, 10 warm-up steps, then ``--repeats`` runs that go on from
where the last left off, so each run of raw, adapter and vector holds the same episode ends and
resets (a MetaWorld reset costs about 30 steps). All paths are built first and then timed in rounds
of one run each, so a drift in this shared machine's speed lands on all of them; medians of the
rounds. Then PPO (``--ppo-minutes`` per suite, state) through ``rlinf-trainer train``: success and
return against wall time from its metrics.jsonl.

Memory: each path holds ``--envs`` envs. LIBERO with a camera holds about 0.9 GB per env, so at 8 envs
its raw and adapter envs (14 GB) and the workers' outgrow 24 GiB: there, ``--envs 4``.

    python benchmarks/sim_suites.py [--steps 1600] [--camera-steps 240] [--repeats 5] [--ppo-minutes 3] [--pinning] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from protos.atomic_files import write_atomic

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
METAWORLD_PYTHON = ROOT / ".venv-metaworld" / "bin" / "python"
MANISKILL_PYTHON = ROOT / ".venv-maniskill" / "bin" / "python"
LIBERO_PYTHON = ROOT / ".venv-libero" / "bin" / "python"
SUITES = {
    "maniskill": {"env_id": "rlinf/ManiSkill-v0", "python": str(MANISKILL_PYTHON), "config": "ppo_maniskill",
                  "kwargs": {"task": "PushCube-v1", "max_episode_steps": 50}, "camera": "base_camera"},
    "metaworld": {"env_id": "rlinf/MetaWorld-v0", "python": str(METAWORLD_PYTHON), "config": "ppo_metaworld",
                  "kwargs": {"task": "reach-v3", "max_episode_steps": 150}, "camera": "corner"},
    "libero": {"env_id": "rlinf/LIBERO-v0", "python": str(LIBERO_PYTHON), "config": "ppo_libero",
               "kwargs": {"suite": "libero_spatial", "task_id": 0, "reward_type": "reach", "max_episode_steps": 60,
                          "settle_steps": 0},
               "camera": "agentview"},
    "gymnasium": {"env_id": "Pendulum-v1", "python": "", "config": "ppo_gym",
                  "kwargs": {"max_episode_steps": 200}, "camera": None},
}  # fmt: skip


# -- in the suite's own interpreter: raw env and our adapter, one process ------------------------
class RawMetaWorld:
    """MetaWorld's own task env, as its MT1 benchmark drives it."""

    def __init__(self, task: str, max_episode_steps: int, camera: str | None, size: int) -> None:
        import metaworld

        from sim_envs.rendering import make_renderer

        self.benchmark = metaworld.MT1(task, seed=0)
        self.env = self.benchmark.train_classes[task]()
        self.env.model.vis.quality.shadowsize = 0  # as the adapter renders by default
        self.limit, self.camera, self.steps = max_episode_steps, camera, 0
        self.renderer = make_renderer(self.env.model, size, size) if camera else None
        self.rng = np.random.default_rng(0)

    def reset(self) -> None:
        tasks = self.benchmark.train_tasks
        self.env.set_task(tasks[int(self.rng.integers(len(tasks)))])
        self.env.reset()
        self.steps = 0

    def step(self, action: np.ndarray) -> None:
        self.env.step(action)
        if self.renderer is not None:
            self.renderer.update_scene(self.env.data, camera=self.camera)
            self.renderer.render()
        self.steps += 1
        if self.steps >= self.limit:
            self.reset()


class RawLibero:
    """LIBERO's own control env, as its evaluations drive it: a soft reset, then ``set_init_state``
    with one of the task's initial states (no settling steps: the suite's kwargs set ``settle_steps=0``)."""

    def __init__(
        self, suite: str, task_id: int, max_episode_steps: int, camera: str | None, size: int
    ) -> None:
        from sim_envs.adapters.libero import bddl_path, find_task, import_libero

        benchmark, control_env = import_libero()
        task, self.init_states = find_task(benchmark, suite, task_id, "")
        self.env = control_env(
            bddl_file_name=bddl_path(task), use_camera_obs=camera is not None,
            has_offscreen_renderer=camera is not None, camera_names=[camera or "agentview"],
            camera_heights=size, camera_widths=size, horizon=max_episode_steps + 1, ignore_done=True,
            hard_reset=False,
        )  # fmt: skip
        self.limit, self.steps, self.episodes = max_episode_steps, 0, 0

    def reset(self) -> None:
        self.env.reset()
        self.env.set_init_state(self.init_states[self.episodes % len(self.init_states)])
        self.steps, self.episodes = 0, self.episodes + 1

    def step(self, action: np.ndarray) -> None:
        self.env.step(action.astype(np.float64))
        self.env.check_success()
        self.steps += 1
        if self.steps >= self.limit:
            self.reset()


class RawManiSkill:
    """ManiSkill's own env: one CPU env, as gym.make gives it."""

    def __init__(self, task: str, max_episode_steps: int, camera: str | None, size: int) -> None:
        import gymnasium as gym
        import mani_skill.envs  # noqa: F401

        options = {"obs_mode": "rgb", "sensor_configs": {"width": size, "height": size}} if camera else {}
        self.env = gym.make(task, num_envs=1, sim_backend="physx_cpu", **{"obs_mode": "state", **options})
        self.limit, self.steps = max_episode_steps, 0

    def reset(self) -> None:
        self.env.reset()
        self.steps = 0

    def step(self, action: np.ndarray) -> None:
        _, _, terminated, _, _ = self.env.step(action)
        self.steps += 1
        if bool(terminated) or self.steps >= self.limit:
            self.reset()


class Stepper:
    """A gymnasium-style env stepped on, reset when its episode ends (raw ``gym.make`` or ours)."""

    def __init__(self, env) -> None:
        self.env = env

    def reset(self) -> None:
        self.env.reset()

    def step(self, action: np.ndarray) -> None:
        _, _, terminated, truncated, _ = self.env.step(action)
        if terminated or truncated:
            self.env.reset()


def our_env(env_id: str, kwargs: dict) -> Stepper:
    import sim_envs

    return Stepper(sim_envs.make(env_id, **kwargs))


def time_envs(envs: list, actions: np.ndarray) -> float:
    """Env steps/s of ``envs`` stepped one after another through ``actions`` [T, N, A], going on from
    where the last call left them (episode ends reset inside the timing, as in the vector env)."""
    start = time.perf_counter()
    for step in actions:
        for env, action in zip(envs, step):
            env.step(action)
    return actions.shape[0] * len(envs) / (time.perf_counter() - start)


def time_vector(vector_env, actions: np.ndarray) -> float:
    """Env steps/s of a gymnasium vector env stepped through ``actions`` [T, N, A] (it resets ended
    episodes itself)."""
    start = time.perf_counter()
    for step in actions:
        vector_env.step(step)
    return actions.shape[0] * actions.shape[1] / (time.perf_counter() - start)


def serve_local_runs(suite: str, camera: bool, steps: int, n: int) -> None:
    """Raw and adapter envs in this interpreter, kept alive: each line "run" on stdin times one run of
    each (raw first) and prints their rates as one JSON line, so the parent can alternate these runs
    with its vector env's on a machine whose speed drifts."""
    import sim_envs  # noqa: F401  picks the GL backend before mujoco is imported

    # stdout carries only this protocol's lines: whatever the suite prints goes to stderr.
    protocol, sys.stdout = sys.stdout, sys.stderr
    s = SUITES[suite]
    kwargs = dict(s["kwargs"])
    raw_vector = None  # gymnasium's own vector env, where the suite is plain gymnasium
    if suite == "maniskill":
        raw = [RawManiSkill(kwargs["task"], kwargs["max_episode_steps"], s["camera"] if camera else None, 128)
               for _ in range(n)]  # fmt: skip
        mode = {"obs_mode": "rgb", "image_size": 128} if camera else {}
        ours = [our_env(s["env_id"], {**kwargs, **mode}) for _ in range(n)]
        dim = 8
    elif suite == "metaworld":
        cams = (s["camera"],) if camera else ()
        raw = [RawMetaWorld(kwargs["task"], kwargs["max_episode_steps"], s["camera"] if camera else None, 128)
               for _ in range(n)]  # fmt: skip
        ours = [our_env(s["env_id"], {**kwargs, "cameras": cams, "image_size": 128}) for _ in range(n)]
        dim = 4
    elif suite == "libero":
        cams = (s["camera"],) if camera else ()
        raw = [RawLibero(kwargs["suite"], kwargs["task_id"], kwargs["max_episode_steps"],
                         s["camera"] if camera else None, 128) for _ in range(n)]  # fmt: skip
        ours = [our_env(s["env_id"], {**kwargs, "cameras": cams, "image_size": 128}) for _ in range(n)]
        dim = 7
    else:
        import gymnasium as gym

        raw = [
            Stepper(gym.make(s["env_id"], max_episode_steps=kwargs["max_episode_steps"])) for _ in range(n)
        ]
        ours = [our_env(s["env_id"], kwargs) for _ in range(n)]
        dim = 1
        raw_vector = gym.make_vec(
            s["env_id"], n, vectorization_mode="sync", max_episode_steps=kwargs["max_episode_steps"]
        )
    actions = np.random.default_rng(0).uniform(-1, 1, (steps // n, n, dim)).astype(np.float32)
    if suite == "gymnasium":
        actions *= 2.0  # Pendulum's torque bounds
    for env in (*raw, *ours):  # once: then every path runs the same schedule as VectorRuns'
        env.reset()
    time_envs(raw, actions[:10]), time_envs(ours, actions[:10])  # warm-up: renderers, caches
    if raw_vector is not None:
        raw_vector.reset(seed=0)
        time_vector(raw_vector, actions[:10])
    print("ready", file=protocol, flush=True)
    for line in sys.stdin:
        if line.strip() == "run":
            rates = {"raw": time_envs(raw, actions), "adapter": time_envs(ours, actions)}
            if raw_vector is not None:
                rates["raw_vector"] = time_vector(raw_vector, actions)
            print(json.dumps(rates), file=protocol, flush=True)


class LocalRuns:
    """The suite's raw and adapter envs in a process of the suite's interpreter (``serve_local_runs``)."""

    def __init__(self, suite: str, camera: bool, steps: int, n: int) -> None:
        python = SUITES[suite]["python"] or sys.executable
        self.proc = subprocess.Popen(
            [python, __file__, "--local", suite, str(int(camera)), "--steps", str(steps), "--envs", str(n)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "MUJOCO_GL": "egl"},
        )  # fmt: skip
        self._expect("ready")

    def _expect(self, what: str) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(self._died(what))
        return line

    def _died(self, what: str) -> str:
        code = self.proc.wait(timeout=60)
        killed = " (killed: out of memory? try fewer --envs)" if code == -9 else ""
        return (
            f"the suite's raw-env process died in its {what} step, exit {code}{killed}; its stderr is above"
        )

    def run_once(self) -> dict[str, float]:
        try:
            self.proc.stdin.write("run\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(self._died("timing")) from None
        return json.loads(self._expect("timing"))

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


# -- in the main interpreter: the vector env and PPO --------------------------------------------
class VectorRuns:
    """``workers`` subprocess workers (from the suite's venv); 0: the inline backend in this process.
    Built, reset and warmed up once; each ``run_once`` goes on from where the last left off."""

    def __init__(self, suite: str, camera: bool, steps: int, n: int, workers: int, pin: bool | None) -> None:
        import sim_envs
        from sim_envs.core_claims import CLAIMS_DIR_ENV

        s = SUITES[suite]
        kwargs = dict(s["kwargs"])
        if camera and suite == "maniskill":
            kwargs.update(obs_mode="rgb", image_size=128)
        elif camera:
            kwargs.update(cameras=[s["camera"]], image_size=128)
        if workers:
            kwargs.update(backend="subprocess", num_workers=workers, python=s["python"], pin_workers=pin)
        self.n = n
        # Each path claims cores from a folder of its own, as a trainer alone on the machine would.
        os.environ[CLAIMS_DIR_ENV] = tempfile.mkdtemp(prefix="rlinf-bench-claims-")
        self.venv = sim_envs.make_vector(s["env_id"], n, **kwargs)
        dim = self.venv.spec.action.dim
        low, high = np.asarray(self.venv.spec.action.low), np.asarray(self.venv.spec.action.high)
        self.actions = np.random.default_rng(0).uniform(low, high, (steps // n, n, 1, dim)).astype(np.float32)
        self.venv.reset(seed=0)
        for chunk in self.actions[:10]:
            self.venv.chunk_step(chunk)

    def run_once(self) -> float:
        start = time.perf_counter()
        for chunk in self.actions:
            self.venv.chunk_step(chunk)
        return self.actions.shape[0] * self.n / (time.perf_counter() - start)

    def close(self) -> None:
        self.venv.close()


def alternating_rates(
    suite: str, camera: bool, steps: int, n: int, repeats: int, pinning: bool
) -> dict[str, list[float]]:
    """Every path built once, then ``repeats`` rounds of one run each: raw, adapter, then the vector
    envs. A drift in the machine's speed then lands on every path alike, not on the one timed last."""
    s = SUITES[suite]
    # A suite with its own venv steps in subprocess workers: one (the raw loop's compute) and two
    # (as train runs on 2 cores), pinned as train pins them, or pinned and not. One from the main
    # venv steps inline.
    vector_paths = (("vector", 1, None), ("vector_2_workers", 2, None))
    if pinning:
        vector_paths = (("vector", 1, True), ("vector_2_workers", 2, True),
                        ("vector_unpinned", 1, False), ("vector_2_workers_unpinned", 2, False))  # fmt: skip
    if not s["python"]:
        vector_paths = (("vector", 0, None),)
    local = LocalRuns(suite, camera, steps, n)
    vectors = {name: VectorRuns(suite, camera, steps, n, workers, pin) for name, workers, pin in vector_paths}
    rates: dict[str, list[float]] = {"raw": [], "adapter": [], **{name: [] for name in vectors}}
    try:
        for _ in range(repeats):
            for name, rate in local.run_once().items():
                rates.setdefault(name, []).append(rate)
            for name, runs in vectors.items():
                rates[name].append(runs.run_once())
    finally:
        local.close()
        for runs in vectors.values():
            runs.close()
    return rates


def ppo_curve(suite: str, minutes: float, work: Path) -> dict:
    s = SUITES[suite]
    out = work / f"ppo-{suite}"
    shutil.rmtree(out, ignore_errors=True)  # this benchmark's own scratch run
    overrides = [f"run.output_dir={out}", f"run.max_wall_minutes={minutes}", "run.total_env_steps=100000000",
                 "run.eval_every=0", "run.final_eval_episodes=16", f"env.kwargs={json.dumps(s['kwargs'])}"]  # fmt: skip
    if s["python"]:
        overrides.append(f"env.python={s['python']}")
    else:
        overrides.append(f"env.id={s['env_id']}")
    subprocess.run([str(ROOT / ".venv" / "bin" / "rlinf-trainer"), "train", "--config", s["config"], *overrides],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    final = json.loads((out / "final_eval.json").read_text())
    return {
        "curve": [
            {k: r.get(k) for k in ("wall_s", "env_steps", "return_mean", "success_rate")} for r in rows
        ],
        "final_eval": {k: final[k] for k in ("success_rate", "return_mean", "episodes", "env_steps")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1600)
    parser.add_argument(
        "--camera-steps", type=int, default=240, help="steps per run with a camera (slow on CPU)"
    )
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ppo-minutes", type=float, default=3.0)
    parser.add_argument("--work", default="runs/bench-sim-suites")
    parser.add_argument("--out", default=str(RESULTS / "sim_suites.json"))
    parser.add_argument(
        "--suites", default=",".join(SUITES), help="run these; others' records in --out are kept"
    )
    parser.add_argument(
        "--pinning", action="store_true", help="time the workers pinned and unpinned, not as train pins them"
    )
    parser.add_argument("--local", nargs=2, metavar=("SUITE", "CAMERA"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.local:  # run by LocalRuns in the suite's interpreter
        serve_local_runs(args.local[0], args.local[1] == "1", args.steps, args.envs)
        return
    for suite, python in (
        ("metaworld", METAWORLD_PYTHON),
        ("maniskill", MANISKILL_PYTHON),
        ("libero", LIBERO_PYTHON),
    ):
        if suite in args.suites and not python.is_file():
            sys.exit(f"no {suite} venv at {python}: bash scripts/sim_venv.sh {suite}")
    out = Path(args.out)
    kept = json.loads(out.read_text())["suites"] if out.is_file() else {}
    results: dict = {"benchmark": "sim_suites", "settings": vars(args), "suites": kept,
                     "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}  # fmt: skip
    for suite in args.suites.split(","):
        s = SUITES[suite]
        record: dict = {
            "settings": {
                k: getattr(args, k)
                for k in ("steps", "camera_steps", "envs", "repeats", "ppo_minutes", "pinning")
            }
        }
        for camera in (False, True) if s["camera"] else (False,):
            steps = args.camera_steps if camera else args.steps
            rates = alternating_rates(suite, camera, steps, args.envs, args.repeats, args.pinning)
            medians = {k: statistics.median(v) for k, v in rates.items()}
            row = {
                **{f"{k}_steps_per_s": round(v, 1) for k, v in medians.items()},
                **{f"{k}_over_raw": round(medians[k] / medians["raw"], 3) for k in medians if k != "raw"},
                **(
                    {"vector_over_raw_vector": round(medians["vector"] / medians["raw_vector"], 3)}
                    if "raw_vector" in medians
                    else {}
                ),
                "runs": rates,
            }
            record["camera_128" if camera else "state"] = row
            print(f"{suite:10} {'camera' if camera else 'state':7} raw {medians['raw']:8.1f}  adapter "
                  f"{medians['adapter']:8.1f}  vector {medians['vector']:8.1f} steps/s  "
                  f"vector/raw {row['vector_over_raw']:.2f}", flush=True)  # fmt: skip
        if args.ppo_minutes > 0:
            record["ppo"] = ppo_curve(suite, args.ppo_minutes, Path(args.work))
            final = record["ppo"]["final_eval"]
            print(f"{suite:10} PPO {args.ppo_minutes:g} min: final greedy success {final['success_rate']:.2f}, "
                  f"return {final['return_mean']:.1f} ({final['env_steps']} env steps)", flush=True)  # fmt: skip
        results["suites"][suite] = record
        write_atomic(out, json.dumps(results, indent=2) + "\n")  # each suite as it finishes
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
