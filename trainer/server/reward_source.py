"""Where a robot episode's rewards come from in ``serve`` train mode (``reward.source``).

A real arm reports reward 0 and never success. One :class:`RobotRewards` per robot slot turns each
played step (its decoded observation and the agent's transition) into the reward and success the
trainer learns from, and says when the episode is over:

* ``env``: the agent's own values (a sim twin's task reward);
* ``classifier``: a success classifier on the frames; success once ``consecutive_frames`` frames in
  a row score at or above the threshold, which gives reward 1 and ends the episode (HIL-SERL);
* ``human``: the teleop device's label: the episode's end event says success or not, reward 1 or 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from protos import robot_link_pb2 as pb
from protos.batch import stack_obs
from protos.env_spec import EnvSpec
from trainer.configs.errors import ConfigError


@dataclass(frozen=True)
class JudgedStep:
    reward: float
    success: bool
    ends_episode: bool  # the source, not the robot, ended the episode here


NOTHING_YET = JudgedStep(0.0, False, False)  # before an episode's first step


class RobotRewards(Protocol):
    source: str
    needs_frames: bool  # whether ``judge`` reads the decoded observation

    def begin(self) -> None: ...

    def judge(self, obs: dict[str, Any] | None, transition: pb.Transition) -> JudgedStep: ...

    def at_end(self, end: pb.EpisodeEvent, last: JudgedStep) -> JudgedStep: ...


class EnvRewards:
    """The agent's own reward and success."""

    source, needs_frames = "env", False

    def begin(self) -> None:
        pass

    def judge(self, obs: dict[str, Any] | None, transition: pb.Transition) -> JudgedStep:
        return JudgedStep(float(transition.reward), bool(transition.success), False)

    def at_end(self, end: pb.EpisodeEvent, last: JudgedStep) -> JudgedStep:
        return JudgedStep(last.reward, bool(end.success or last.success), False)


class ClassifierRewards:
    """Success when the classifier scores ``consecutive`` frames in a row at or above ``threshold``."""

    source, needs_frames = "classifier", True

    def __init__(self, classifier, threshold: float, consecutive: int) -> None:
        self.classifier, self.threshold, self.consecutive = classifier, threshold, consecutive
        self.streak = 0
        self.last_probability = 0.0

    def begin(self) -> None:
        self.streak = 0

    def judge(self, obs: dict[str, Any] | None, transition: pb.Transition) -> JudgedStep:
        assert obs is not None
        self.last_probability = float(self.classifier.probability(stack_obs([obs]))[0])
        self.streak = self.streak + 1 if self.last_probability >= self.threshold else 0
        success = self.streak >= self.consecutive
        return JudgedStep(1.0 if success else 0.0, success, success)

    def at_end(self, end: pb.EpisodeEvent, last: JudgedStep) -> JudgedStep:
        return last


class HumanRewards:
    """The teleop label at the episode's end: reward 1 for success, 0 otherwise; 0 on every step."""

    source, needs_frames = "human", False

    def begin(self) -> None:
        pass

    def judge(self, obs: dict[str, Any] | None, transition: pb.Transition) -> JudgedStep:
        return JudgedStep(0.0, False, False)

    def at_end(self, end: pb.EpisodeEvent, last: JudgedStep) -> JudgedStep:
        return JudgedStep(1.0 if end.success else 0.0, bool(end.success), False)


def reward_factory(section, spec: EnvSpec):
    """A function that makes one :class:`RobotRewards` per robot slot, for ``reward.*``."""
    if section.source == "env":
        return EnvRewards
    if section.source == "human":
        return HumanRewards
    from policies.reward import load_classifier

    classifier = load_classifier(section.classifier)
    problem = classifier_mismatch(classifier.spec, classifier.cfg, spec)
    if problem:
        raise ConfigError(f"reward.classifier={section.classifier!r} {problem}")
    classifier.eval()
    threshold = section.threshold or classifier.cfg.threshold
    return lambda: ClassifierRewards(classifier, threshold, section.consecutive_frames)


def classifier_mismatch(trained: EnvSpec, cfg, spec: EnvSpec) -> str:
    """Why a classifier trained on ``trained`` cannot judge the pool's ``spec`` ('' if it can)."""
    if cfg.use_state and trained.state_fields != spec.state_fields:
        return f"reads state fields {[f.name for f in trained.state_fields]}, the robots give {[f.name for f in spec.state_fields]}"
    for camera in cfg.cameras:
        if camera not in spec.camera_names:
            return f"reads camera {camera!r}, which the robots' spec lacks ({list(spec.camera_names)})"
        if trained.camera(camera).shape != spec.camera(camera).shape:
            return f"reads {camera!r} at {list(trained.camera(camera).shape)}, the robots' is {list(spec.camera(camera).shape)}"
    return ""
