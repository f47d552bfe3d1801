"""Dynamics identification: fit the sim's physics to recorded robot episodes.

Each recorded episode is replayed open loop in the sim: the arm (and the cube, where the state
carries its pose) is put where the robot's first frame was, the executed actions are played, and
the sim's state after each step is compared with the robot's next recorded state. CMA-ES searches
the parameters of :data:`sim_envs.physics.SEARCH_RANGES` that minimise that error. The result is a
physics file the sim reads (``env.kwargs.physics_file``), with the error before and after.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from protos.lerobot_dataset import DatasetError
from protos.user_error import UserError
from sim_envs.physics import SEARCH_RANGES, PhysicsParams
from sim_envs.sim_arm import SIM_ARM_MODULES, arm_for_robot_type, sim_arm

# The state fields compared, and the size of an error that counts as 1 in the objective.
ERROR_SCALES = {"tcp_pos": 0.01, "joint_pos": 0.05, "gripper_width": 0.005, "cube_pos": 0.01}


class SysIdError(UserError, ValueError):
    """Input sysid cannot use; the message is one line."""


@dataclass(frozen=True)
class SysIdConfig:
    """What to fit, to which episodes, and how long to search."""

    dataset: str
    task: str = "pick_lift"
    params: tuple[str, ...] = tuple(SEARCH_RANGES)
    max_episodes: int = 20
    generations: int = 16
    population: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [p for p in self.params if p not in SEARCH_RANGES]
        if unknown or not self.params:
            raise SysIdError(f"--params must name some of {list(SEARCH_RANGES)}, got {list(self.params)}")
        if self.max_episodes < 1 or self.generations < 1 or self.population < 2:
            raise SysIdError("--episodes and --generations must be >= 1 and --population >= 2")


@dataclass(frozen=True)
class RecordedEpisode:
    """One robot episode: the state of every frame (by field name) and the action executed there."""

    states: dict[str, np.ndarray]  # field -> [T, size]
    actions: np.ndarray  # [T, action_dim]

    @property
    def length(self) -> int:
        return len(self.actions)


@dataclass
class FitResult:
    """The fitted parameters and the replay error before (nominal sim) and after."""

    params: PhysicsParams
    error_before: float
    error_after: float
    field_rms_before: dict[str, float]
    field_rms_after: dict[str, float]
    per_parameter: dict[str, dict] = field(default_factory=dict)
    evaluations: int = 0

    def report(self) -> dict:
        return {
            "error_before": self.error_before,
            "error_after": self.error_after,
            "field_rms_before": self.field_rms_before,
            "field_rms_after": self.field_rms_after,
            "per_parameter": self.per_parameter,
            "evaluations": self.evaluations,
        }


# -- reading the robot's episodes ---------------------------------------------------------------
@dataclass(frozen=True)
class RecordedEpisodes:
    """The episodes sysid fits to, with the rate and the action names they were recorded with, and
    the sim arm that replays them (from the dataset's ``robot_type``)."""

    episodes: list[RecordedEpisode]
    fps: float
    action_names: tuple[str, ...]
    robot: str = "panda"


def load_recorded_episodes(root: str | Path, max_episodes: int) -> RecordedEpisodes:
    """Up to ``max_episodes`` complete (not aborted) episodes of a dataset of an arm the sim has."""
    from protos.lerobot_reader import read_episodes, read_frames, read_info

    try:
        info = read_info(root)
        features = info["features"]
        state_names = list(features.get("observation.state", {}).get("names") or [])
        recorded_actions = list(features.get("action", {}).get("names") or [])
        robot = _sim_arm_of(root, str(info.get("robot_type") or ""))
        fields = sim_arm(robot).embodiment.state_fields
        proprio = [f.name if f.size == 1 else f"{f.name}.{i}" for f in fields for i in range(f.size)]
        if state_names[: len(proprio)] != proprio:
            raise SysIdError(
                f"dataset {str(root)!r} is a {robot}'s, but its state does not start with the {robot}'s "
                f"proprioception {[f.name for f in fields]}"
            )
        if int(info.get("total_episodes", 0)) == 0:
            raise SysIdError(f"dataset {str(root)!r} has no episodes")
        frames = read_frames(root)
        rows = read_episodes(root)
    except DatasetError as exc:
        raise SysIdError(str(exc)) from None
    aborted = set(rows.loc[rows["aborted"].astype(bool), "episode_index"]) if "aborted" in rows else set()
    columns = _field_columns(state_names)
    episodes = []
    for index, group in frames.groupby("episode_index", sort=True):
        if index in aborted or len(group) < 2:
            continue
        states = np.stack(group["observation.state"].to_numpy()).astype(np.float64)
        episodes.append(
            RecordedEpisode(
                {name: states[:, cols] for name, cols in columns.items()},
                np.stack(group["action"].to_numpy()).astype(np.float32),
            )
        )
        if len(episodes) == max_episodes:
            break
    if not episodes:
        raise SysIdError(f"dataset {str(root)!r} has no complete episode of 2 or more frames")
    return RecordedEpisodes(episodes, float(info["fps"]), tuple(recorded_actions), robot)


def _sim_arm_of(root: str | Path, robot_type: str) -> str:
    robot = arm_for_robot_type(robot_type)
    if robot is None:
        known = [sim_arm(name).spec_robot for name in SIM_ARM_MODULES]
        raise SysIdError(
            f"dataset {str(root)!r} has robot_type {robot_type!r}; sysid replays the sim's arms, {known}"
        )
    return robot


def _field_columns(state_names: list[str]) -> dict[str, list[int]]:
    columns: dict[str, list[int]] = {}
    for i, name in enumerate(state_names):
        columns.setdefault(name.rsplit(".", 1)[0] if "." in name else name, []).append(i)
    return columns


# -- replaying them in the sim ------------------------------------------------------------------
class EpisodeReplayer:
    """Replays recorded episodes open loop in one sim env under given physics parameters."""

    def __init__(
        self, task: str, recorded: RecordedEpisodes, action_scale: dict[str, float] | None = None
    ) -> None:
        """``action_scale``: the robot's ``max_translation_m`` / ``max_rotation_rad`` (what a full
        action moved it by), where it is not the sim's default."""
        from sim_envs.franka_env import FrankaEnv

        try:
            self.env = FrankaEnv(task=task, robot=recorded.robot, cameras=(), privileged_state=True,
                                 control_hz=recorded.fps,
                                 action_rotation=len(recorded.action_names) == 7, initial_joint_noise=0.0,
                                 **(action_scale or {}))  # fmt: skip
        except ValueError as exc:
            raise SysIdError(f"the sim cannot replay these episodes: {exc}") from None
        if self.env.env_spec.action.names != recorded.action_names:
            raise SysIdError(
                f"the episodes' actions are {list(recorded.action_names)}, the sim's {list(self.env.env_spec.action.names)}"
            )
        self.compared = ("tcp_pos", "joint_pos", "gripper_width", "cube_pos")

    def replay(self, episode: RecordedEpisode, params: PhysicsParams) -> dict[str, np.ndarray]:
        """The sim's state fields after each recorded action but the last: ``field -> [T-1, size]``."""
        env = self.env
        env.set_physics(params)
        env.reset(seed=0)
        env.restore_state({name: values[0] for name, values in episode.states.items()})
        slices = env.privileged_spec().state_slices()
        out: dict[str, list[np.ndarray]] = {name: [] for name in self.compared}
        for action in episode.actions[:-1]:
            env.step(np.clip(action, env.action_space.low, env.action_space.high))
            state = env.privileged_state()
            for name in self.compared:
                if name in slices:
                    out[name].append(state[slices[name]])
        return {name: np.asarray(values) for name, values in out.items() if values}

    def squared_errors(self, episodes: Sequence[RecordedEpisode], params: PhysicsParams) -> dict[str, float]:
        """Mean squared error per compared field (natural units), over every step of every episode."""
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for episode in episodes:
            simulated = self.replay(episode, params)
            for name, values in simulated.items():
                if name not in episode.states:
                    continue
                error = values - episode.states[name][1:]
                sums[name] = sums.get(name, 0.0) + float(np.sum(error**2))
                counts[name] = counts.get(name, 0) + error.size
        return {name: sums[name] / counts[name] for name in sums}


def objective(mse: dict[str, float]) -> float:
    """One number: the mean over compared fields of (RMS error / its scale)^2."""
    return float(np.mean([mse[name] / ERROR_SCALES[name] ** 2 for name in mse]))


def field_rms(mse: dict[str, float]) -> dict[str, float]:
    return {name: float(np.sqrt(value)) for name, value in mse.items()}


# -- the search ---------------------------------------------------------------------------------
def fit(
    episodes: Sequence[RecordedEpisode], replayer: EpisodeReplayer, cfg: SysIdConfig,
    progress: Callable[[int, float], None] | None = None,
) -> FitResult:  # fmt: skip
    """CMA-ES over ``cfg.params`` in the unit box of their search ranges; the rest stay nominal."""
    import cma

    ranges = [SEARCH_RANGES[name] for name in cfg.params]
    step_ms = replayer.env.cfg.physics_dt * 1000.0

    def params_of(x: np.ndarray) -> PhysicsParams:
        values = {
            name: r.low + float(np.clip(v, 0, 1)) * (r.high - r.low)
            for name, r, v in zip(cfg.params, ranges, x)
        }
        if "control_latency_ms" in values:  # the sim delays commands by whole physics steps
            values["control_latency_ms"] = round(values["control_latency_ms"] / step_ms) * step_ms
        return replace(PhysicsParams(), **values)

    def loss(x: np.ndarray) -> float:
        return objective(replayer.squared_errors(episodes, params_of(x)))

    nominal = PhysicsParams()
    start = np.array([(r.nominal - r.low) / (r.high - r.low) for r in ranges])
    options = {"bounds": [0.0, 1.0], "popsize": cfg.population, "seed": cfg.seed + 1, "verbose": -9,
               "maxiter": cfg.generations}  # fmt: skip
    if len(start) == 1:  # CMA-ES needs two dimensions or more: add one that nothing reads
        start = np.append(start, 0.5)
    search = cma.CMAEvolutionStrategy(start, 0.3, options)
    best_x, best_loss, evaluations = start, loss(start), 1
    for generation in range(cfg.generations):
        candidates = search.ask()
        losses = [loss(np.asarray(x)) for x in candidates]
        evaluations += len(candidates)
        search.tell(candidates, losses)
        i = int(np.argmin(losses))
        if losses[i] < best_loss:
            best_x, best_loss = np.asarray(candidates[i]), losses[i]
        if progress is not None:
            progress(generation, best_loss)
        if search.stop() and generation > 0:
            break
    searched = params_of(best_x)
    nominal_mse = replayer.squared_errors(episodes, nominal)
    before = objective(nominal_mse)
    searched_error = objective(replayer.squared_errors(episodes, searched))
    # A parameter the episodes cannot tell apart (left nominal, the error rises by under 10 %) stays
    # nominal: the search wanders along flat directions, and a wandered value is a guess, not a fit.
    fitted, per_parameter = searched, {}
    for name in cfg.params:
        back = replace(searched, **{name: getattr(nominal, name)})
        back_error = objective(replayer.squared_errors(episodes, back))
        identified = back_error > 1.1 * searched_error + 1e-4 * before
        if not identified:
            fitted = replace(fitted, **{name: getattr(nominal, name)})
        alone = replace(nominal, **{name: getattr(searched, name)})
        per_parameter[name] = {
            "nominal": getattr(nominal, name),
            "searched": getattr(searched, name),
            "fitted": getattr(fitted, name),
            "identified": identified,
            "unit": SEARCH_RANGES[name].unit,
            "error_with_only_this_fitted": objective(replayer.squared_errors(episodes, alone)),
            "error_with_only_this_nominal": back_error,
        }
    after = replayer.squared_errors(episodes, fitted)
    return FitResult(fitted, before, objective(after), field_rms(nominal_mse),
                     field_rms(after), per_parameter, evaluations)  # fmt: skip


def plot_overlay(
    path: str | Path, episode: RecordedEpisode, replayer: EpisodeReplayer, fitted: PhysicsParams, fps: float
) -> None:
    """Recorded vs nominal-sim vs fitted-sim trajectories of one episode (TCP, gripper, cube height)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {
        "nominal sim": replayer.replay(episode, PhysicsParams()),
        "fitted sim": replayer.replay(episode, fitted),
    }
    panels = [("tcp_pos", i, f"tcp {axis} [m]") for i, axis in enumerate("xyz")] + [
        ("gripper_width", 0, "gripper [m]")
    ]
    if "cube_pos" in episode.states:
        panels.append(("cube_pos", 2, "cube z [m]"))
    figure, axes = plt.subplots(len(panels), 1, figsize=(7, 1.8 * len(panels)), sharex=True)
    time = np.arange(1, episode.length) / fps
    for ax, (name, column, label) in zip(axes, panels):
        ax.plot(time, episode.states[name][1:, column], "-", color="0.65", lw=3.5, label="robot")
        for (run, values), style in zip(runs.items(), ("r--", "b-")):
            ax.plot(time, values[name][:, column], style, lw=1.2, label=run)
        ax.set_ylabel(label)
    axes[0].legend(loc="best", fontsize=8)
    axes[-1].set_xlabel("time [s]")
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)


def physics_report(result: FitResult, cfg: SysIdConfig, episodes: int) -> dict:
    return {"config": asdict(cfg), "episodes": episodes, **result.report()}
