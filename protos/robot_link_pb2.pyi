from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Codec(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CODEC_UNSPECIFIED: _ClassVar[Codec]
    CODEC_RAW_RGB8: _ClassVar[Codec]
    CODEC_JPEG: _ClassVar[Codec]
    CODEC_RING: _ClassVar[Codec]

class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODE_UNSPECIFIED: _ClassVar[Mode]
    MODE_POLICY: _ClassVar[Mode]
    MODE_TELEOP: _ClassVar[Mode]
    MODE_INTERVENTION: _ClassVar[Mode]
CODEC_UNSPECIFIED: Codec
CODEC_RAW_RGB8: Codec
CODEC_JPEG: Codec
CODEC_RING: Codec
MODE_UNSPECIFIED: Mode
MODE_POLICY: Mode
MODE_TELEOP: Mode
MODE_INTERVENTION: Mode

class CameraSpec(_message.Message):
    __slots__ = ("name", "height", "width", "fps", "max_downscale")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    FPS_FIELD_NUMBER: _ClassVar[int]
    MAX_DOWNSCALE_FIELD_NUMBER: _ClassVar[int]
    name: str
    height: int
    width: int
    fps: float
    max_downscale: int
    def __init__(self, name: _Optional[str] = ..., height: _Optional[int] = ..., width: _Optional[int] = ..., fps: _Optional[float] = ..., max_downscale: _Optional[int] = ...) -> None: ...

class StateField(_message.Message):
    __slots__ = ("name", "size", "low", "high")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    low: float
    high: float
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., low: _Optional[float] = ..., high: _Optional[float] = ...) -> None: ...

class ActionSpace(_message.Message):
    __slots__ = ("kind", "names", "low", "high")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    kind: str
    names: _containers.RepeatedScalarFieldContainer[str]
    low: _containers.RepeatedScalarFieldContainer[float]
    high: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, kind: _Optional[str] = ..., names: _Optional[_Iterable[str]] = ..., low: _Optional[_Iterable[float]] = ..., high: _Optional[_Iterable[float]] = ...) -> None: ...

class EnvSpec(_message.Message):
    __slots__ = ("name", "cameras", "state_fields", "action", "control_hz", "instruction", "max_episode_steps", "metadata", "reward_low", "reward_high")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    CAMERAS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELDS_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CONTROL_HZ_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    MAX_EPISODE_STEPS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REWARD_LOW_FIELD_NUMBER: _ClassVar[int]
    REWARD_HIGH_FIELD_NUMBER: _ClassVar[int]
    name: str
    cameras: _containers.RepeatedCompositeFieldContainer[CameraSpec]
    state_fields: _containers.RepeatedCompositeFieldContainer[StateField]
    action: ActionSpace
    control_hz: float
    instruction: str
    max_episode_steps: int
    metadata: _containers.ScalarMap[str, str]
    reward_low: float
    reward_high: float
    def __init__(self, name: _Optional[str] = ..., cameras: _Optional[_Iterable[_Union[CameraSpec, _Mapping]]] = ..., state_fields: _Optional[_Iterable[_Union[StateField, _Mapping]]] = ..., action: _Optional[_Union[ActionSpace, _Mapping]] = ..., control_hz: _Optional[float] = ..., instruction: _Optional[str] = ..., max_episode_steps: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., reward_low: _Optional[float] = ..., reward_high: _Optional[float] = ...) -> None: ...

class AgentMessage(_message.Message):
    __slots__ = ("register", "observation", "episode_event", "episode_upload", "error", "probe")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    EPISODE_EVENT_FIELD_NUMBER: _ClassVar[int]
    EPISODE_UPLOAD_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PROBE_FIELD_NUMBER: _ClassVar[int]
    register: Register
    observation: Observation
    episode_event: EpisodeEvent
    episode_upload: EpisodeUpload
    error: AgentError
    probe: LinkProbe
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., observation: _Optional[_Union[Observation, _Mapping]] = ..., episode_event: _Optional[_Union[EpisodeEvent, _Mapping]] = ..., episode_upload: _Optional[_Union[EpisodeUpload, _Mapping]] = ..., error: _Optional[_Union[AgentError, _Mapping]] = ..., probe: _Optional[_Union[LinkProbe, _Mapping]] = ...) -> None: ...

class LinkProbe(_message.Message):
    __slots__ = ("id", "padding")
    ID_FIELD_NUMBER: _ClassVar[int]
    PADDING_FIELD_NUMBER: _ClassVar[int]
    id: int
    padding: bytes
    def __init__(self, id: _Optional[int] = ..., padding: _Optional[bytes] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("robot_id", "robot_kind", "spec", "agent_version", "protocol_version", "capabilities", "unacked_episode_ids", "resume_token", "frame_ring")
    ROBOT_ID_FIELD_NUMBER: _ClassVar[int]
    ROBOT_KIND_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    UNACKED_EPISODE_IDS_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FRAME_RING_FIELD_NUMBER: _ClassVar[int]
    robot_id: str
    robot_kind: str
    spec: EnvSpec
    agent_version: str
    protocol_version: int
    capabilities: DriverCapabilities
    unacked_episode_ids: _containers.RepeatedScalarFieldContainer[str]
    resume_token: str
    frame_ring: FrameRing
    def __init__(self, robot_id: _Optional[str] = ..., robot_kind: _Optional[str] = ..., spec: _Optional[_Union[EnvSpec, _Mapping]] = ..., agent_version: _Optional[str] = ..., protocol_version: _Optional[int] = ..., capabilities: _Optional[_Union[DriverCapabilities, _Mapping]] = ..., unacked_episode_ids: _Optional[_Iterable[str]] = ..., resume_token: _Optional[str] = ..., frame_ring: _Optional[_Union[FrameRing, _Mapping]] = ...) -> None: ...

class FrameRing(_message.Message):
    __slots__ = ("path", "slots", "slot_bytes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    SLOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    path: str
    slots: int
    slot_bytes: int
    def __init__(self, path: _Optional[str] = ..., slots: _Optional[int] = ..., slot_bytes: _Optional[int] = ...) -> None: ...

class DriverCapabilities(_message.Message):
    __slots__ = ("reset", "reward", "gripper", "action_kinds")
    RESET_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    GRIPPER_FIELD_NUMBER: _ClassVar[int]
    ACTION_KINDS_FIELD_NUMBER: _ClassVar[int]
    reset: bool
    reward: bool
    gripper: bool
    action_kinds: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reset: _Optional[bool] = ..., reward: _Optional[bool] = ..., gripper: _Optional[bool] = ..., action_kinds: _Optional[_Iterable[str]] = ...) -> None: ...

class Frame(_message.Message):
    __slots__ = ("camera", "codec", "height", "width", "data", "capture_mono_ns", "ring_slot", "ring_offset", "jpeg_quality", "downscale")
    CAMERA_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    RING_SLOT_FIELD_NUMBER: _ClassVar[int]
    RING_OFFSET_FIELD_NUMBER: _ClassVar[int]
    JPEG_QUALITY_FIELD_NUMBER: _ClassVar[int]
    DOWNSCALE_FIELD_NUMBER: _ClassVar[int]
    camera: str
    codec: Codec
    height: int
    width: int
    data: bytes
    capture_mono_ns: int
    ring_slot: int
    ring_offset: int
    jpeg_quality: int
    downscale: int
    def __init__(self, camera: _Optional[str] = ..., codec: _Optional[_Union[Codec, str]] = ..., height: _Optional[int] = ..., width: _Optional[int] = ..., data: _Optional[bytes] = ..., capture_mono_ns: _Optional[int] = ..., ring_slot: _Optional[int] = ..., ring_offset: _Optional[int] = ..., jpeg_quality: _Optional[int] = ..., downscale: _Optional[int] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("seq", "episode_id", "step", "mono_ns", "wall_ns", "frames", "state", "instruction", "transition", "mode", "holding", "codec_reason")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    MONO_NS_FIELD_NUMBER: _ClassVar[int]
    WALL_NS_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    TRANSITION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    HOLDING_FIELD_NUMBER: _ClassVar[int]
    CODEC_REASON_FIELD_NUMBER: _ClassVar[int]
    seq: int
    episode_id: str
    step: int
    mono_ns: int
    wall_ns: int
    frames: _containers.RepeatedCompositeFieldContainer[Frame]
    state: _containers.RepeatedScalarFieldContainer[float]
    instruction: str
    transition: Transition
    mode: Mode
    holding: bool
    codec_reason: str
    def __init__(self, seq: _Optional[int] = ..., episode_id: _Optional[str] = ..., step: _Optional[int] = ..., mono_ns: _Optional[int] = ..., wall_ns: _Optional[int] = ..., frames: _Optional[_Iterable[_Union[Frame, _Mapping]]] = ..., state: _Optional[_Iterable[float]] = ..., instruction: _Optional[str] = ..., transition: _Optional[_Union[Transition, _Mapping]] = ..., mode: _Optional[_Union[Mode, str]] = ..., holding: _Optional[bool] = ..., codec_reason: _Optional[str] = ...) -> None: ...

class Transition(_message.Message):
    __slots__ = ("executed_action", "policy_action", "intervened", "human_action", "reward", "terminated", "truncated", "success", "safety_events", "policy_version")
    EXECUTED_ACTION_FIELD_NUMBER: _ClassVar[int]
    POLICY_ACTION_FIELD_NUMBER: _ClassVar[int]
    INTERVENED_FIELD_NUMBER: _ClassVar[int]
    HUMAN_ACTION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    SAFETY_EVENTS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    executed_action: _containers.RepeatedScalarFieldContainer[float]
    policy_action: _containers.RepeatedScalarFieldContainer[float]
    intervened: bool
    human_action: _containers.RepeatedScalarFieldContainer[float]
    reward: float
    terminated: bool
    truncated: bool
    success: bool
    safety_events: _containers.RepeatedScalarFieldContainer[str]
    policy_version: int
    def __init__(self, executed_action: _Optional[_Iterable[float]] = ..., policy_action: _Optional[_Iterable[float]] = ..., intervened: _Optional[bool] = ..., human_action: _Optional[_Iterable[float]] = ..., reward: _Optional[float] = ..., terminated: _Optional[bool] = ..., truncated: _Optional[bool] = ..., success: _Optional[bool] = ..., safety_events: _Optional[_Iterable[str]] = ..., policy_version: _Optional[int] = ...) -> None: ...

class EpisodeEvent(_message.Message):
    __slots__ = ("kind", "episode_id", "num_steps", "success", "reason")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[EpisodeEvent.Kind]
        STARTED: _ClassVar[EpisodeEvent.Kind]
        ENDED: _ClassVar[EpisodeEvent.Kind]
        ABORTED: _ClassVar[EpisodeEvent.Kind]
    KIND_UNSPECIFIED: EpisodeEvent.Kind
    STARTED: EpisodeEvent.Kind
    ENDED: EpisodeEvent.Kind
    ABORTED: EpisodeEvent.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kind: EpisodeEvent.Kind
    episode_id: str
    num_steps: int
    success: bool
    reason: str
    def __init__(self, kind: _Optional[_Union[EpisodeEvent.Kind, str]] = ..., episode_id: _Optional[str] = ..., num_steps: _Optional[int] = ..., success: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class EpisodeUpload(_message.Message):
    __slots__ = ("episode_id", "part", "last", "observations", "end")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    part: int
    last: bool
    observations: _containers.RepeatedCompositeFieldContainer[Observation]
    end: EpisodeEvent
    def __init__(self, episode_id: _Optional[str] = ..., part: _Optional[int] = ..., last: _Optional[bool] = ..., observations: _Optional[_Iterable[_Union[Observation, _Mapping]]] = ..., end: _Optional[_Union[EpisodeEvent, _Mapping]] = ...) -> None: ...

class AgentError(_message.Message):
    __slots__ = ("code", "message", "ref_seq")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REF_SEQ_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    ref_seq: int
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., ref_seq: _Optional[int] = ...) -> None: ...

class TrainerMessage(_message.Message):
    __slots__ = ("welcome", "actions", "command", "ack", "probe_echo")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    PROBE_ECHO_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    actions: ActionChunk
    command: Command
    ack: Ack
    probe_echo: LinkProbe
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., actions: _Optional[_Union[ActionChunk, _Mapping]] = ..., command: _Optional[_Union[Command, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., probe_echo: _Optional[_Union[LinkProbe, _Mapping]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("session_id", "protocol_version", "trainer_version", "resume_token", "frame_ring_accepted", "echoes_probes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRAINER_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FRAME_RING_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    ECHOES_PROBES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    protocol_version: int
    trainer_version: str
    resume_token: str
    frame_ring_accepted: bool
    echoes_probes: bool
    def __init__(self, session_id: _Optional[str] = ..., protocol_version: _Optional[int] = ..., trainer_version: _Optional[str] = ..., resume_token: _Optional[str] = ..., frame_ring_accepted: _Optional[bool] = ..., echoes_probes: _Optional[bool] = ...) -> None: ...

class ActionChunk(_message.Message):
    __slots__ = ("obs_seq", "chunk_len", "action_dim", "values", "max_age_ms", "policy_version")
    OBS_SEQ_FIELD_NUMBER: _ClassVar[int]
    CHUNK_LEN_FIELD_NUMBER: _ClassVar[int]
    ACTION_DIM_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    MAX_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    obs_seq: int
    chunk_len: int
    action_dim: int
    values: _containers.RepeatedScalarFieldContainer[float]
    max_age_ms: int
    policy_version: int
    def __init__(self, obs_seq: _Optional[int] = ..., chunk_len: _Optional[int] = ..., action_dim: _Optional[int] = ..., values: _Optional[_Iterable[float]] = ..., max_age_ms: _Optional[int] = ..., policy_version: _Optional[int] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("kind", "seed", "instruction", "mode", "episode_id", "reason")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[Command.Kind]
        START_EPISODE: _ClassVar[Command.Kind]
        STOP_EPISODE: _ClassVar[Command.Kind]
        HOLD: _ClassVar[Command.Kind]
        SET_MODE: _ClassVar[Command.Kind]
        SHUTDOWN: _ClassVar[Command.Kind]
        ESTOP: _ClassVar[Command.Kind]
    KIND_UNSPECIFIED: Command.Kind
    START_EPISODE: Command.Kind
    STOP_EPISODE: Command.Kind
    HOLD: Command.Kind
    SET_MODE: Command.Kind
    SHUTDOWN: Command.Kind
    ESTOP: Command.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kind: Command.Kind
    seed: int
    instruction: str
    mode: Mode
    episode_id: str
    reason: str
    def __init__(self, kind: _Optional[_Union[Command.Kind, str]] = ..., seed: _Optional[int] = ..., instruction: _Optional[str] = ..., mode: _Optional[_Union[Mode, str]] = ..., episode_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("episode_id", "status")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[Ack.Status]
        STORED: _ClassVar[Ack.Status]
        INCOMPLETE: _ClassVar[Ack.Status]
    STATUS_UNSPECIFIED: Ack.Status
    STORED: Ack.Status
    INCOMPLETE: Ack.Status
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    status: Ack.Status
    def __init__(self, episode_id: _Optional[str] = ..., status: _Optional[_Union[Ack.Status, str]] = ...) -> None: ...
