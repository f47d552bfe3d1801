"""MetaWorld v3 tasks behind the env contract: ``rlinf/MetaWorld-v0`` with ``task=reach-v3`` (any of
MetaWorld's 50 v3 task names).

* **Resets.** Like MetaWorld's MT1 benchmark: each reset draws one of the task's 50 training
  variations (object and goal positions) from ``reset(seed)``'s generator, so a seed gives the
  same episode every time (gymnasium's ``Meta-World/MT1`` draws from a generator seeded once).
* **Observation.** The 39-dim state as named fields (hand, gripper, two objects, the previous
  frame's hand/gripper/objects, goal); ``cameras`` renders MetaWorld's named cameras at
  ``image_size`` (shadow maps off unless ``shadows``, as in our Franka scenes); the instruction is the task's name in words ("pick place").
* **Action.** ``[dx, dy, dz, gripper]`` in [-1, 1], kind ``box``: a Sawyer no robot of ours runs.
* **Success / horizon.** ``info["success"]``; episodes truncate at ``max_episode_steps`` (at most
  MetaWorld's own 500).

MetaWorld pins an older MuJoCo than the main venv's, so it runs in its own venv
(``bash scripts/sim_venv.sh metaworld``) whose subprocess workers the trainer starts with
``env.python=.venv-metaworld/bin/python``.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import gymnasium as gym
import numpy as np

from protos import ActionSpace, CameraSpec, EnvSpec, StateField
from protos.env_spec import BOX
from sim_envs.adapters.gymnasium import AdapterError, contract_observation_space
from sim_envs.rendering import make_renderer

ENV_ID = "rlinf/MetaWorld-v0"
CAMERAS = ("corner", "corner2", "corner3", "topview", "behindGripper", "gripperPOV")
STATE_FIELDS = (
    StateField("hand_pos", 3),
    StateField("gripper_distance", 1),
    StateField("object_1", 7),  # position + quaternion
    StateField("object_2", 7),  # zeros where the task has one object
    StateField("previous", 18),  # the previous frame's hand, gripper and objects
    StateField("goal_pos", 3),
)
SETUP_HINT = "bash scripts/sim_venv.sh metaworld, then env.python=.venv-metaworld/bin/python"


def import_metaworld():
    """``metaworld``, once this interpreter's MuJoCo is the one it pins (else a one-line error:
    with another MuJoCo it imports, then fails inside its first reset)."""
    try:
        requires = importlib.metadata.requires("metaworld") or []
    except importlib.metadata.PackageNotFoundError:
        raise AdapterError(f"{ENV_ID} needs MetaWorld (the metaworld extra): {SETUP_HINT}") from None
    import mujoco

    pins = [
        r.split("==")[1].split(";")[0].strip() for r in requires if r.replace(" ", "").startswith("mujoco==")
    ]
    if pins and mujoco.__version__ != pins[0]:
        raise AdapterError(
            f"{ENV_ID}: metaworld needs mujoco=={pins[0]}, this interpreter has {mujoco.__version__}; "
            f"run it in its own venv: {SETUP_HINT}"
        )
    import metaworld

    return metaworld


class MetaWorldExpert:
    """MetaWorld's own scripted policy for a task (``metaworld.policies``), behind our experts'
    ``reset`` / ``act({"state": ...})``: it reads the 39-dim state, goal included."""

    def __init__(self, task: str) -> None:
        from metaworld.policies import ENV_POLICY_MAP

        if task not in ENV_POLICY_MAP:
            raise AdapterError(f"{ENV_ID}: MetaWorld ships no scripted policy for {task!r}")
        self.policy = ENV_POLICY_MAP[task]()

    def reset(self) -> None:
        pass  # MetaWorld's policies keep no state between steps

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        action = self.policy.get_action(np.asarray(obs["state"], np.float64))
        return np.clip(action, -1.0, 1.0).astype(np.float32)


def instruction_of(task: str) -> str:
    """'pick-place-v3' -> 'pick place'."""
    return task.rsplit("-v", 1)[0].replace("-", " ")


class MetaWorldEnv(gym.Env):
    """One MetaWorld v3 task (its 50 MT1 variations) seen through :class:`EnvSpec`."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        task: str = "reach-v3",
        cameras: tuple[str, ...] = (),
        image_size: int = 128,
        max_episode_steps: int = 150,
        control_hz: float = 80.0,  # MetaWorld's frame skip of 5 at a 2.5 ms timestep
        terminate_on_success: bool = False,
        shadows: bool = False,  # MetaWorld's 4096 px shadow map: 3x slower offscreen on a CPU
        render_mode: str | None = None,
        render_size: int = 160,
    ) -> None:
        metaworld = import_metaworld()
        if task not in metaworld.env_dict.ALL_V3_ENVIRONMENTS:
            known = ", ".join(sorted(metaworld.env_dict.ALL_V3_ENVIRONMENTS)[:6])
            raise AdapterError(f"{ENV_ID}: unknown task {task!r}; MetaWorld's v3 tasks are e.g. {known}, ...")
        unknown = [c for c in cameras if c not in CAMERAS]
        if unknown:
            raise AdapterError(f"{ENV_ID}: unknown camera {unknown[0]!r}; MetaWorld has {list(CAMERAS)}")
        self.benchmark = metaworld.MT1(task, seed=0)
        self.env = self.benchmark.train_classes[task]()
        if not shadows:
            self.env.model.vis.quality.shadowsize = 0
        horizon = int(self.env.max_path_length)
        if not 1 <= max_episode_steps <= horizon:
            raise AdapterError(
                f"{ENV_ID}: max_episode_steps must be in 1..{horizon}, got {max_episode_steps}"
            )
        self.task, self.cameras, self.image_size = task, tuple(cameras), image_size
        self.terminate_on_success, self.render_mode, self.render_size = (
            terminate_on_success,
            render_mode,
            render_size,
        )
        self.max_episode_steps = max_episode_steps
        self.env_spec = EnvSpec(
            name=ENV_ID,
            cameras=tuple(CameraSpec(c, image_size, image_size, control_hz) for c in self.cameras),
            state_fields=STATE_FIELDS,
            action=ActionSpace(BOX, ("dx", "dy", "dz", "gripper"), (-1.0,) * 4, (1.0,) * 4),
            control_hz=control_hz,
            instruction=instruction_of(task),
            max_episode_steps=max_episode_steps,
            metadata={"simulator": "metaworld", "task": task, "robot": "sawyer"},
        )
        self.observation_space = contract_observation_space(self.env_spec)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), dtype=np.float32)
        self._renderers: dict[int, Any] = {}
        self._steps = 0

    def _render(self, camera: str, size: int) -> np.ndarray:
        if size not in self._renderers:
            self._renderers[size] = make_renderer(self.env.model, size, size)
        renderer = self._renderers[size]
        renderer.update_scene(self.env.data, camera=camera)
        return renderer.render()

    def scripted_expert(self) -> MetaWorldExpert:
        """The task's scripted policy, as MetaWorld ships it (``rlinf-trainer demos`` plays it)."""
        return MetaWorldExpert(self.task)

    def privileged_state(self, perceived: bool = True) -> np.ndarray:
        """What the expert reads: the full state (the policy sees the same). MetaWorld has no
        perception offset, so the state as perceived and as it is are one."""
        del perceived
        return self._raw

    def _observation(self, raw: np.ndarray) -> dict[str, Any]:
        self._raw = np.asarray(raw, np.float32)
        return {
            "images": {c: self._render(c, self.image_size) for c in self.cameras},
            "state": self._raw,
            "instruction": self.env_spec.instruction,
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        variation = int(self.np_random.integers(len(self.benchmark.train_tasks)))
        self.env.set_task(self.benchmark.train_tasks[variation])
        raw, _ = self.env.reset(seed=seed)
        self._steps = 0
        return self._observation(raw), {"success": False, "variation": variation}

    def step(self, action):
        action = np.clip(np.asarray(action, np.float32).reshape(4), -1.0, 1.0)
        raw, reward, _, _, info = self.env.step(action)
        self._steps += 1
        success = bool(info.get("success", 0.0) > 0)
        terminated = success and self.terminate_on_success
        truncated = not terminated and self._steps >= self.max_episode_steps
        return self._observation(raw), float(reward), terminated, truncated, {"success": success}

    def render(self):
        return self._render("corner", self.render_size) if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
        self.env.close()
