"""Who may open a robot session, and what it may cost: decided before the session exists.

A registration is refused, with a status the agent understands, when
- its robot id is bound to a credential the agent did not present (a per-robot token, or the
  client certificate's common name under mutual TLS);
- another live session holds the id and the agent cannot prove it is the same agent (the resume
  token its last Welcome gave it): no one takes over a robot's commands by claiming its id;
- its spec lets the session hold more memory than ``max_session_bytes`` (see :func:`session_budget`);
- its episodes could not go into the dataset being recorded (other cameras, dims or rate).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import grpc

from protos.env_spec import EnvSpec
from protos.field_limits import TRANSPORT_BYTES, UPLOAD_PART_BYTES
from protos.link_codec import JPEG_OVERHEAD_BYTES

# What a session buffers, in observations, besides its episodes (``RobotSession.recent``).
RECENT_OBSERVATIONS = 256
# Episodes a robot may have open on the live stream at once (the next starts as one ends).
LIVE_EPISODES = 2
# Episodes of one robot being stored at once while its stream reads on (past that, it waits).
STORES_IN_FLIGHT = 2
OBSERVATION_OVERHEAD_BYTES = 512  # the message object and its small fields


@dataclass(frozen=True)
class Refusal:
    """Why a registration is refused, as the gRPC status the agent receives."""

    code: grpc.StatusCode
    message: str


@dataclass(frozen=True)
class SessionBudget:
    """The most memory one robot's session can make the trainer hold, from its spec alone."""

    observation_bytes: int  # one observation at the largest size its spec allows
    episode_bytes: int  # max_episode_steps + 1 of them
    total_bytes: int

    def describe(self) -> str:
        return (
            f"{self.total_bytes / 2**20:.0f} MiB ({self.observation_bytes / 2**20:.2f} MiB per observation x "
            f"(episodes: {LIVE_EPISODES} live + 1 upload + {STORES_IN_FLIGHT} storing, "
            f"and {RECENT_OBSERVATIONS} recent))"
        )


UPLOAD_HEADROOM_BYTES = 256 * 1024  # an upload part's framing and its episode's end event


def transport_limit(features: Mapping | None) -> int:
    """gRPC's receive limit for a run whose dataset schema is ``features`` (``features_of``'s form):
    an upload part beside the largest observation the schema allows, so a bigger message is refused
    by gRPC from its length prefix, never copied into Python. Unknown schema: the link's 32 MB."""
    if features is None:
        return TRANSPORT_BYTES
    frames = sum(h * w * 3 + JPEG_OVERHEAD_BYTES for h, w, _ in features["cameras"].values())
    vectors = 4 * (int(features["observation.state"] or 0) + 3 * int(features["action"] or 0))
    observation = frames + vectors + OBSERVATION_OVERHEAD_BYTES
    return min(TRANSPORT_BYTES, UPLOAD_PART_BYTES + observation + UPLOAD_HEADROOM_BYTES)


def session_budget(spec: EnvSpec) -> SessionBudget:
    """Bytes held for one robot at most: its live episodes, an upload being received, episodes being
    stored and the recent-observation window, each observation at the largest size the link admits
    for its spec (raw frames, or JPEGs up to raw size plus headers). Storing decodes one frame at a time."""
    frame_bytes = sum(c.height * c.width * 3 + JPEG_OVERHEAD_BYTES for c in spec.cameras)
    vector_bytes = 4 * (spec.state_dim + 3 * spec.action.dim)
    observation = frame_bytes + vector_bytes + OBSERVATION_OVERHEAD_BYTES
    episode = (spec.max_episode_steps + 1) * observation
    decoded_frame = max((c.height * c.width * 3 for c in spec.cameras), default=0)
    total = (
        episode * (LIVE_EPISODES + 1 + STORES_IN_FLIGHT) + RECENT_OBSERVATIONS * observation + decoded_frame
    )
    return SessionBudget(observation, episode, total)


def check_budget(spec: EnvSpec, max_session_bytes: int) -> Refusal | None:
    budget = session_budget(spec)
    if budget.total_bytes <= max_session_bytes:
        return None
    return Refusal(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"spec {spec.name!r} could make this robot's session hold {budget.describe()}, over "
        f"server.max_session_bytes={max_session_bytes}; send smaller cameras or fewer max_episode_steps",
    )


def check_identity(
    robot_id: str,
    presented_token: str | None,
    certificate_names: Iterable[str],
    robot_tokens: Mapping[str, str],
    mutual_tls: bool,
) -> Refusal | None:
    """A robot id bound to a token needs that token; under mutual TLS the id is the certificate's CN."""
    if mutual_tls and robot_id not in set(certificate_names):
        return Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            f"robot id {robot_id!r} does not match the client certificate ({sorted(certificate_names)}); "
            "under mutual TLS a robot registers as its certificate's common name",
        )
    bound = robot_tokens.get(robot_id)
    if bound is not None and not (
        presented_token is not None and hmac.compare_digest(presented_token.encode(), bound.encode())
    ):
        return Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            f"robot id {robot_id!r} is bound to its own token (server.robot_tokens_file); present that token",
        )
    if robot_tokens and bound is None and presented_token in robot_tokens.values():
        return Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            f"this token belongs to another robot, not to {robot_id!r}",
        )
    return None


def check_takeover(live_resume_token: str | None, presented: str, robot_id: str, peer: str) -> Refusal | None:
    """A live session's robot id is taken over only by the agent that holds its resume token."""
    if live_resume_token is None:
        return None
    if presented and hmac.compare_digest(presented.encode(), live_resume_token.encode()):
        return None
    return Refusal(
        grpc.StatusCode.ALREADY_EXISTS,
        f"robot {robot_id!r} is already connected; a second session from {peer} was refused "
        "(the same agent reconnecting proves itself with its resume token)",
    )
