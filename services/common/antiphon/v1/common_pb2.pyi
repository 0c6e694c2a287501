from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TurnDetectionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_DETECTION_MODE_UNSPECIFIED: _ClassVar[TurnDetectionMode]
    TURN_DETECTION_MODE_SERVER_VAD: _ClassVar[TurnDetectionMode]
    TURN_DETECTION_MODE_NONE: _ClassVar[TurnDetectionMode]
    TURN_DETECTION_MODE_SEMANTIC_VAD: _ClassVar[TurnDetectionMode]
TURN_DETECTION_MODE_UNSPECIFIED: TurnDetectionMode
TURN_DETECTION_MODE_SERVER_VAD: TurnDetectionMode
TURN_DETECTION_MODE_NONE: TurnDetectionMode
TURN_DETECTION_MODE_SEMANTIC_VAD: TurnDetectionMode

class TurnDetection(_message.Message):
    __slots__ = ("mode", "threshold", "prefix_padding_ms", "silence_duration_ms", "create_response", "interrupt_response", "eagerness")
    MODE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    PREFIX_PADDING_MS_FIELD_NUMBER: _ClassVar[int]
    SILENCE_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    CREATE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    EAGERNESS_FIELD_NUMBER: _ClassVar[int]
    mode: TurnDetectionMode
    threshold: float
    prefix_padding_ms: int
    silence_duration_ms: int
    create_response: bool
    interrupt_response: bool
    eagerness: str
    def __init__(self, mode: _Optional[_Union[TurnDetectionMode, str]] = ..., threshold: _Optional[float] = ..., prefix_padding_ms: _Optional[int] = ..., silence_duration_ms: _Optional[int] = ..., create_response: _Optional[bool] = ..., interrupt_response: _Optional[bool] = ..., eagerness: _Optional[str] = ...) -> None: ...

class AudioFormat(_message.Message):
    __slots__ = ("encoding", "sample_rate_hz")
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    encoding: str
    sample_rate_hz: int
    def __init__(self, encoding: _Optional[str] = ..., sample_rate_hz: _Optional[int] = ...) -> None: ...

class SessionConfig(_message.Message):
    __slots__ = ("model", "instructions", "voice", "output_modalities", "input_audio_format", "output_audio_format", "turn_detection", "temperature", "max_output_tokens", "native_duplex", "auto_response", "overlap_policy", "playback_commit_policy", "return_stage_metrics", "idle_timeout_s", "resumable", "speed", "truncation", "tools", "tool_choice")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    INPUT_AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TURN_DETECTION_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NATIVE_DUPLEX_FIELD_NUMBER: _ClassVar[int]
    AUTO_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_COMMIT_POLICY_FIELD_NUMBER: _ClassVar[int]
    RETURN_STAGE_METRICS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    RESUMABLE_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    model: str
    instructions: str
    voice: str
    output_modalities: _containers.RepeatedScalarFieldContainer[str]
    input_audio_format: AudioFormat
    output_audio_format: AudioFormat
    turn_detection: TurnDetection
    temperature: float
    max_output_tokens: int
    native_duplex: bool
    auto_response: bool
    overlap_policy: str
    playback_commit_policy: str
    return_stage_metrics: bool
    idle_timeout_s: float
    resumable: bool
    speed: float
    truncation: Truncation
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    tool_choice: ToolChoice
    def __init__(self, model: _Optional[str] = ..., instructions: _Optional[str] = ..., voice: _Optional[str] = ..., output_modalities: _Optional[_Iterable[str]] = ..., input_audio_format: _Optional[_Union[AudioFormat, _Mapping]] = ..., output_audio_format: _Optional[_Union[AudioFormat, _Mapping]] = ..., turn_detection: _Optional[_Union[TurnDetection, _Mapping]] = ..., temperature: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., native_duplex: _Optional[bool] = ..., auto_response: _Optional[bool] = ..., overlap_policy: _Optional[str] = ..., playback_commit_policy: _Optional[str] = ..., return_stage_metrics: _Optional[bool] = ..., idle_timeout_s: _Optional[float] = ..., resumable: _Optional[bool] = ..., speed: _Optional[float] = ..., truncation: _Optional[_Union[Truncation, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ...) -> None: ...

class Truncation(_message.Message):
    __slots__ = ("type", "retention_ratio")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    RETENTION_RATIO_FIELD_NUMBER: _ClassVar[int]
    type: str
    retention_ratio: float
    def __init__(self, type: _Optional[str] = ..., retention_ratio: _Optional[float] = ...) -> None: ...

class SessionConfigPatch(_message.Message):
    __slots__ = ("model", "instructions", "voice", "output_modalities", "has_output_modalities", "input_audio_format", "output_audio_format", "turn_detection", "has_turn_detection", "temperature", "max_output_tokens", "native_duplex", "auto_response", "overlap_policy", "playback_commit_policy", "return_stage_metrics", "session_id", "resumable", "speed", "truncation", "tools", "has_tools", "tool_choice")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    HAS_OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    INPUT_AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TURN_DETECTION_FIELD_NUMBER: _ClassVar[int]
    HAS_TURN_DETECTION_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NATIVE_DUPLEX_FIELD_NUMBER: _ClassVar[int]
    AUTO_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_COMMIT_POLICY_FIELD_NUMBER: _ClassVar[int]
    RETURN_STAGE_METRICS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RESUMABLE_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    HAS_TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    model: str
    instructions: str
    voice: str
    output_modalities: _containers.RepeatedScalarFieldContainer[str]
    has_output_modalities: bool
    input_audio_format: AudioFormat
    output_audio_format: AudioFormat
    turn_detection: TurnDetection
    has_turn_detection: bool
    temperature: float
    max_output_tokens: int
    native_duplex: bool
    auto_response: bool
    overlap_policy: str
    playback_commit_policy: str
    return_stage_metrics: bool
    session_id: str
    resumable: bool
    speed: float
    truncation: Truncation
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    has_tools: bool
    tool_choice: ToolChoice
    def __init__(self, model: _Optional[str] = ..., instructions: _Optional[str] = ..., voice: _Optional[str] = ..., output_modalities: _Optional[_Iterable[str]] = ..., has_output_modalities: _Optional[bool] = ..., input_audio_format: _Optional[_Union[AudioFormat, _Mapping]] = ..., output_audio_format: _Optional[_Union[AudioFormat, _Mapping]] = ..., turn_detection: _Optional[_Union[TurnDetection, _Mapping]] = ..., has_turn_detection: _Optional[bool] = ..., temperature: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., native_duplex: _Optional[bool] = ..., auto_response: _Optional[bool] = ..., overlap_policy: _Optional[str] = ..., playback_commit_policy: _Optional[str] = ..., return_stage_metrics: _Optional[bool] = ..., session_id: _Optional[str] = ..., resumable: _Optional[bool] = ..., speed: _Optional[float] = ..., truncation: _Optional[_Union[Truncation, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., has_tools: _Optional[bool] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "description", "parameters")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[str] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ("mode", "name")
    MODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    mode: str
    name: str
    def __init__(self, mode: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("call_id", "name", "arguments")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    name: str
    arguments: str
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("implementation_level", "supports_input_append", "supports_barge_in", "supports_session_resume", "supports_audio_truncate", "chunk_period_ms", "input_modes", "input_sample_rate_hz", "model_native", "supports_context_text", "supports_tool_calls", "consumes_video_frames")
    IMPLEMENTATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_INPUT_APPEND_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_BARGE_IN_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_SESSION_RESUME_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_AUDIO_TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    INPUT_MODES_FIELD_NUMBER: _ClassVar[int]
    INPUT_SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    MODEL_NATIVE_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_CONTEXT_TEXT_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    CONSUMES_VIDEO_FRAMES_FIELD_NUMBER: _ClassVar[int]
    implementation_level: str
    supports_input_append: bool
    supports_barge_in: bool
    supports_session_resume: bool
    supports_audio_truncate: bool
    chunk_period_ms: int
    input_modes: _containers.RepeatedScalarFieldContainer[str]
    input_sample_rate_hz: int
    model_native: bool
    supports_context_text: bool
    supports_tool_calls: bool
    consumes_video_frames: bool
    def __init__(self, implementation_level: _Optional[str] = ..., supports_input_append: _Optional[bool] = ..., supports_barge_in: _Optional[bool] = ..., supports_session_resume: _Optional[bool] = ..., supports_audio_truncate: _Optional[bool] = ..., chunk_period_ms: _Optional[int] = ..., input_modes: _Optional[_Iterable[str]] = ..., input_sample_rate_hz: _Optional[int] = ..., model_native: _Optional[bool] = ..., supports_context_text: _Optional[bool] = ..., supports_tool_calls: _Optional[bool] = ..., consumes_video_frames: _Optional[bool] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ("type", "text", "transcript", "audio", "sample_rate_hz")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    type: str
    text: str
    transcript: str
    audio: bytes
    sample_rate_hz: int
    def __init__(self, type: _Optional[str] = ..., text: _Optional[str] = ..., transcript: _Optional[str] = ..., audio: _Optional[bytes] = ..., sample_rate_hz: _Optional[int] = ...) -> None: ...

class Item(_message.Message):
    __slots__ = ("id", "type", "role", "status", "content", "call_id", "name", "arguments", "output")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    role: str
    status: str
    content: _containers.RepeatedCompositeFieldContainer[ContentPart]
    call_id: str
    name: str
    arguments: str
    output: str
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., role: _Optional[str] = ..., status: _Optional[str] = ..., content: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ..., call_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ..., output: _Optional[str] = ...) -> None: ...

class Playback(_message.Message):
    __slots__ = ("generated_ms", "sent_ms", "played_ms", "committed_ms")
    GENERATED_MS_FIELD_NUMBER: _ClassVar[int]
    SENT_MS_FIELD_NUMBER: _ClassVar[int]
    PLAYED_MS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    generated_ms: int
    sent_ms: int
    played_ms: int
    committed_ms: int
    def __init__(self, generated_ms: _Optional[int] = ..., sent_ms: _Optional[int] = ..., played_ms: _Optional[int] = ..., committed_ms: _Optional[int] = ...) -> None: ...

class StageMetrics(_message.Message):
    __slots__ = ("ttft_ms", "tpot_ms", "itl_ms", "num_generation_tokens", "num_prompt_tokens", "stage1_first_audio_ms", "prompt")
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    ITL_MS_FIELD_NUMBER: _ClassVar[int]
    NUM_GENERATION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STAGE1_FIRST_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    ttft_ms: float
    tpot_ms: float
    itl_ms: _containers.RepeatedScalarFieldContainer[float]
    num_generation_tokens: int
    num_prompt_tokens: int
    stage1_first_audio_ms: float
    prompt: str
    def __init__(self, ttft_ms: _Optional[float] = ..., tpot_ms: _Optional[float] = ..., itl_ms: _Optional[_Iterable[float]] = ..., num_generation_tokens: _Optional[int] = ..., num_prompt_tokens: _Optional[int] = ..., stage1_first_audio_ms: _Optional[float] = ..., prompt: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "tool_calls", "tool_call_id")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class AudioTextMark(_message.Message):
    __slots__ = ("text_chars", "audio_end_ms")
    TEXT_CHARS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    text_chars: int
    audio_end_ms: int
    def __init__(self, text_chars: _Optional[int] = ..., audio_end_ms: _Optional[int] = ...) -> None: ...
