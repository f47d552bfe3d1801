"""The counting sink acknowledges an episode once per robot and keeps none of its frames."""

import numpy as np

from protos import robot_link_pb2 as pb
from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
from trainer.server.episodes import CountingEpisodeSink, EpisodeAssembler

SPEC = EnvSpec("tiny", (CameraSpec("front", 4, 4, 10.0),), (StateField("tcp_pos", 3),),
               ee_delta_action_space(), 10.0, "", 3)  # fmt: skip


def play(assembler: EpisodeAssembler, episode_id: str) -> pb.Ack:
    for step in range(3):
        assembler.on_observation(
            pb.Observation(
                seq=step,
                episode_id=episode_id,
                step=step,
                state=[0.0] * 3,
                frames=[
                    pb.Frame(
                        camera="front",
                        codec=pb.CODEC_RAW_RGB8,
                        height=4,
                        width=4,
                        data=np.zeros(48, np.uint8).tobytes(),
                    )
                ],
            )
        )
    return assembler.on_end(pb.EpisodeEvent(kind=pb.EpisodeEvent.ENDED, episode_id=episode_id, num_steps=2))


def test_an_episode_is_acknowledged_once_per_robot_and_its_frames_are_let_go():
    sink = CountingEpisodeSink()
    arm_a, arm_b = EpisodeAssembler("a", SPEC, sink), EpisodeAssembler("b", SPEC, sink)
    assert play(arm_a, "ep-1").status == pb.Ack.STORED
    assert play(arm_a, "ep-1").status == pb.Ack.STORED and arm_a.duplicates == 1  # a resend
    assert play(arm_b, "ep-1").status == pb.Ack.STORED and arm_b.duplicates == 0  # another robot's
    assert sink.has("ep-1", "a") and sink.has("ep-1", "b") and not sink.has("ep-2")
    assert sink.stored == {("a", "ep-1"), ("b", "ep-1")}  # ids only: no observation is kept
