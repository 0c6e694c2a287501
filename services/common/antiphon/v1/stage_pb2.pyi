from antiphon.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Lane(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LANE_UNSPECIFIED: _ClassVar[Lane]
    LANE_MANUAL: _ClassVar[Lane]
    LANE_SERVER_VAD: _ClassVar[Lane]
    LANE_NATIVE: _ClassVar[Lane]

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    DECISION_LISTEN: _ClassVar[Decision]
    DECISION_SPEAK: _ClassVar[Decision]
LANE_UNSPECIFIED: Lane
LANE_MANUAL: Lane
LANE_SERVER_VAD: Lane
LANE_NATIVE: Lane
DECISION_UNSPECIFIED: Decision
DECISION_LISTEN: Decision
DECISION_SPEAK: Decision

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StageInfo(_message.Message):
    __slots__ = ("backend", "capabilities", "capacity", "active_sessions")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    backend: str
    capabilities: _common_pb2.Capabilities
    capacity: int
    active_sessions: int
    def __init__(self, backend: _Optional[str] = ..., capabilities: _Optional[_Union[_common_pb2.Capabilities, _Mapping]] = ..., capacity: _Optional[int] = ..., active_sessions: _Optional[int] = ...) -> None: ...

class Stage0Open(_message.Message):
    __slots__ = ("session_id", "lane", "turn_detection", "skip_vad", "instructions", "voice", "preemptive", "tools")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    TURN_DETECTION_FIELD_NUMBER: _ClassVar[int]
    SKIP_VAD_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIVE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    lane: Lane
    turn_detection: _common_pb2.TurnDetection
    skip_vad: bool
    instructions: str
    voice: str
    preemptive: bool
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.Tool]
    def __init__(self, session_id: _Optional[str] = ..., lane: _Optional[_Union[Lane, str]] = ..., turn_detection: _Optional[_Union[_common_pb2.TurnDetection, _Mapping]] = ..., skip_vad: _Optional[bool] = ..., instructions: _Optional[str] = ..., voice: _Optional[str] = ..., preemptive: _Optional[bool] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.Tool, _Mapping]]] = ...) -> None: ...

class Stage0Audio(_message.Message):
    __slots__ = ("epoch", "pcm16", "video_frames", "max_slice_nums")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PCM16_FIELD_NUMBER: _ClassVar[int]
    VIDEO_FRAMES_FIELD_NUMBER: _ClassVar[int]
    MAX_SLICE_NUMS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    pcm16: bytes
    video_frames: _containers.RepeatedScalarFieldContainer[bytes]
    max_slice_nums: int
    def __init__(self, epoch: _Optional[int] = ..., pcm16: _Optional[bytes] = ..., video_frames: _Optional[_Iterable[bytes]] = ..., max_slice_nums: _Optional[int] = ...) -> None: ...

class Stage0Commit(_message.Message):
    __slots__ = ("epoch", "item_id")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    item_id: str
    def __init__(self, epoch: _Optional[int] = ..., item_id: _Optional[str] = ...) -> None: ...

class Stage0ClearInput(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class Generate(_message.Message):
    __slots__ = ("epoch", "response_id", "messages", "temperature", "max_output_tokens", "retention_ratio", "tools", "tool_choice")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_RATIO_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    response_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ChatMessage]
    temperature: float
    max_output_tokens: int
    retention_ratio: float
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.Tool]
    tool_choice: _common_pb2.ToolChoice
    def __init__(self, epoch: _Optional[int] = ..., response_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.ChatMessage, _Mapping]]] = ..., temperature: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., retention_ratio: _Optional[float] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.Tool, _Mapping]]] = ..., tool_choice: _Optional[_Union[_common_pb2.ToolChoice, _Mapping]] = ...) -> None: ...

class Stage0Cancel(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class StageCancelResponse(_message.Message):
    __slots__ = ("response_id",)
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    def __init__(self, response_id: _Optional[str] = ...) -> None: ...

class Stage0Context(_message.Message):
    __slots__ = ("epoch", "id", "text")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    id: str
    text: str
    def __init__(self, epoch: _Optional[int] = ..., id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class Stage0ToolOutput(_message.Message):
    __slots__ = ("epoch", "call_id", "output")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    call_id: str
    output: str
    def __init__(self, epoch: _Optional[int] = ..., call_id: _Optional[str] = ..., output: _Optional[str] = ...) -> None: ...

class Stage0Request(_message.Message):
    __slots__ = ("open", "audio", "commit", "clear_input", "generate", "cancel", "configure", "cancel_response", "context", "tool_output")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    CLEAR_INPUT_FIELD_NUMBER: _ClassVar[int]
    GENERATE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    CONFIGURE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    open: Stage0Open
    audio: Stage0Audio
    commit: Stage0Commit
    clear_input: Stage0ClearInput
    generate: Generate
    cancel: Stage0Cancel
    configure: Stage0Open
    cancel_response: StageCancelResponse
    context: Stage0Context
    tool_output: Stage0ToolOutput
    def __init__(self, open: _Optional[_Union[Stage0Open, _Mapping]] = ..., audio: _Optional[_Union[Stage0Audio, _Mapping]] = ..., commit: _Optional[_Union[Stage0Commit, _Mapping]] = ..., clear_input: _Optional[_Union[Stage0ClearInput, _Mapping]] = ..., generate: _Optional[_Union[Generate, _Mapping]] = ..., cancel: _Optional[_Union[Stage0Cancel, _Mapping]] = ..., configure: _Optional[_Union[Stage0Open, _Mapping]] = ..., cancel_response: _Optional[_Union[StageCancelResponse, _Mapping]] = ..., context: _Optional[_Union[Stage0Context, _Mapping]] = ..., tool_output: _Optional[_Union[Stage0ToolOutput, _Mapping]] = ...) -> None: ...

class VadSpeechStarted(_message.Message):
    __slots__ = ("epoch", "audio_start_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AUDIO_START_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    audio_start_ms: int
    def __init__(self, epoch: _Optional[int] = ..., audio_start_ms: _Optional[int] = ...) -> None: ...

class VadSpeechStopped(_message.Message):
    __slots__ = ("epoch", "audio_end_ms", "speech_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    SPEECH_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    audio_end_ms: int
    speech_ms: int
    def __init__(self, epoch: _Optional[int] = ..., audio_end_ms: _Optional[int] = ..., speech_ms: _Optional[int] = ...) -> None: ...

class Utterance(_message.Message):
    __slots__ = ("epoch", "transcript", "audio_end_ms", "decision")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    transcript: str
    audio_end_ms: int
    decision: Decision
    def __init__(self, epoch: _Optional[int] = ..., transcript: _Optional[str] = ..., audio_end_ms: _Optional[int] = ..., decision: _Optional[_Union[Decision, str]] = ...) -> None: ...

class UtterancePause(_message.Message):
    __slots__ = ("epoch", "audio_end_ms", "transcript")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    audio_end_ms: int
    transcript: str
    def __init__(self, epoch: _Optional[int] = ..., audio_end_ms: _Optional[int] = ..., transcript: _Optional[str] = ...) -> None: ...

class SpeechResumed(_message.Message):
    __slots__ = ("epoch", "audio_start_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AUDIO_START_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    audio_start_ms: int
    def __init__(self, epoch: _Optional[int] = ..., audio_start_ms: _Optional[int] = ...) -> None: ...

class TranscriptPartial(_message.Message):
    __slots__ = ("epoch", "text")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    text: str
    def __init__(self, epoch: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class UnitDecision(_message.Message):
    __slots__ = ("epoch", "decision", "audio_end_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    decision: Decision
    audio_end_ms: int
    def __init__(self, epoch: _Optional[int] = ..., decision: _Optional[_Union[Decision, str]] = ..., audio_end_ms: _Optional[int] = ...) -> None: ...

class Transcript(_message.Message):
    __slots__ = ("epoch", "item_id", "text", "audio_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    item_id: str
    text: str
    audio_ms: int
    def __init__(self, epoch: _Optional[int] = ..., item_id: _Optional[str] = ..., text: _Optional[str] = ..., audio_ms: _Optional[int] = ...) -> None: ...

class GenerationDelta(_message.Message):
    __slots__ = ("epoch", "response_id", "text")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    response_id: str
    text: str
    def __init__(self, epoch: _Optional[int] = ..., response_id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class GenerationDone(_message.Message):
    __slots__ = ("epoch", "response_id", "finish_reason", "metrics")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    response_id: str
    finish_reason: str
    metrics: _common_pb2.StageMetrics
    def __init__(self, epoch: _Optional[int] = ..., response_id: _Optional[str] = ..., finish_reason: _Optional[str] = ..., metrics: _Optional[_Union[_common_pb2.StageMetrics, _Mapping]] = ...) -> None: ...

class GenerationToolCall(_message.Message):
    __slots__ = ("epoch", "response_id", "call", "refused")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    response_id: str
    call: _common_pb2.ToolCall
    refused: bool
    def __init__(self, epoch: _Optional[int] = ..., response_id: _Optional[str] = ..., call: _Optional[_Union[_common_pb2.ToolCall, _Mapping]] = ..., refused: _Optional[bool] = ...) -> None: ...

class ModelFrame(_message.Message):
    __slots__ = ("epoch", "index", "text", "codes", "decision", "late", "tokens", "turn_ended")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CODES_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    LATE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TURN_ENDED_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    index: int
    text: str
    codes: _containers.RepeatedScalarFieldContainer[int]
    decision: Decision
    late: bool
    tokens: _containers.RepeatedScalarFieldContainer[int]
    turn_ended: bool
    def __init__(self, epoch: _Optional[int] = ..., index: _Optional[int] = ..., text: _Optional[str] = ..., codes: _Optional[_Iterable[int]] = ..., decision: _Optional[_Union[Decision, str]] = ..., late: _Optional[bool] = ..., tokens: _Optional[_Iterable[int]] = ..., turn_ended: _Optional[bool] = ...) -> None: ...

class StageError(_message.Message):
    __slots__ = ("epoch", "response_id", "code", "message")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    response_id: str
    code: str
    message: str
    def __init__(self, epoch: _Optional[int] = ..., response_id: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ContextTaken(_message.Message):
    __slots__ = ("epoch", "id", "index")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    id: str
    index: int
    def __init__(self, epoch: _Optional[int] = ..., id: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class Stage0Event(_message.Message):
    __slots__ = ("speech_started", "speech_stopped", "utterance", "unit_decision", "transcript", "delta", "done", "error", "tool_call", "frame", "pause", "resumed", "partial", "context_taken")
    SPEECH_STARTED_FIELD_NUMBER: _ClassVar[int]
    SPEECH_STOPPED_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_FIELD_NUMBER: _ClassVar[int]
    UNIT_DECISION_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TAKEN_FIELD_NUMBER: _ClassVar[int]
    speech_started: VadSpeechStarted
    speech_stopped: VadSpeechStopped
    utterance: Utterance
    unit_decision: UnitDecision
    transcript: Transcript
    delta: GenerationDelta
    done: GenerationDone
    error: StageError
    tool_call: GenerationToolCall
    frame: ModelFrame
    pause: UtterancePause
    resumed: SpeechResumed
    partial: TranscriptPartial
    context_taken: ContextTaken
    def __init__(self, speech_started: _Optional[_Union[VadSpeechStarted, _Mapping]] = ..., speech_stopped: _Optional[_Union[VadSpeechStopped, _Mapping]] = ..., utterance: _Optional[_Union[Utterance, _Mapping]] = ..., unit_decision: _Optional[_Union[UnitDecision, _Mapping]] = ..., transcript: _Optional[_Union[Transcript, _Mapping]] = ..., delta: _Optional[_Union[GenerationDelta, _Mapping]] = ..., done: _Optional[_Union[GenerationDone, _Mapping]] = ..., error: _Optional[_Union[StageError, _Mapping]] = ..., tool_call: _Optional[_Union[GenerationToolCall, _Mapping]] = ..., frame: _Optional[_Union[ModelFrame, _Mapping]] = ..., pause: _Optional[_Union[UtterancePause, _Mapping]] = ..., resumed: _Optional[_Union[SpeechResumed, _Mapping]] = ..., partial: _Optional[_Union[TranscriptPartial, _Mapping]] = ..., context_taken: _Optional[_Union[ContextTaken, _Mapping]] = ...) -> None: ...

class Stage1Open(_message.Message):
    __slots__ = ("session_id", "voice", "sample_rate_hz", "speed")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    voice: str
    sample_rate_hz: int
    speed: float
    def __init__(self, session_id: _Optional[str] = ..., voice: _Optional[str] = ..., sample_rate_hz: _Optional[int] = ..., speed: _Optional[float] = ...) -> None: ...

class SynthesizeText(_message.Message):
    __slots__ = ("epoch", "response_id", "text", "final")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    response_id: str
    text: str
    final: bool
    def __init__(self, epoch: _Optional[int] = ..., response_id: _Optional[str] = ..., text: _Optional[str] = ..., final: _Optional[bool] = ...) -> None: ...

class DecodeFrame(_message.Message):
    __slots__ = ("epoch", "response_id", "codes", "text", "index", "tokens")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    CODES_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    response_id: str
    codes: _containers.RepeatedScalarFieldContainer[int]
    text: str
    index: int
    tokens: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, epoch: _Optional[int] = ..., response_id: _Optional[str] = ..., codes: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., index: _Optional[int] = ..., tokens: _Optional[_Iterable[int]] = ...) -> None: ...

class Stage1Cancel(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class Stage1Request(_message.Message):
    __slots__ = ("open", "text", "cancel", "frame", "cancel_response")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    open: Stage1Open
    text: SynthesizeText
    cancel: Stage1Cancel
    frame: DecodeFrame
    cancel_response: StageCancelResponse
    def __init__(self, open: _Optional[_Union[Stage1Open, _Mapping]] = ..., text: _Optional[_Union[SynthesizeText, _Mapping]] = ..., cancel: _Optional[_Union[Stage1Cancel, _Mapping]] = ..., frame: _Optional[_Union[DecodeFrame, _Mapping]] = ..., cancel_response: _Optional[_Union[StageCancelResponse, _Mapping]] = ...) -> None: ...

class AudioChunk(_message.Message):
    __slots__ = ("epoch", "response_id", "pcm16", "sample_rate_hz", "text", "duration_ms", "marks")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    PCM16_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    MARKS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    response_id: str
    pcm16: bytes
    sample_rate_hz: int
    text: str
    duration_ms: int
    marks: _containers.RepeatedCompositeFieldContainer[_common_pb2.AudioTextMark]
    def __init__(self, epoch: _Optional[int] = ..., response_id: _Optional[str] = ..., pcm16: _Optional[bytes] = ..., sample_rate_hz: _Optional[int] = ..., text: _Optional[str] = ..., duration_ms: _Optional[int] = ..., marks: _Optional[_Iterable[_Union[_common_pb2.AudioTextMark, _Mapping]]] = ...) -> None: ...

class SynthesisDone(_message.Message):
    __slots__ = ("epoch", "response_id", "first_audio_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    response_id: str
    first_audio_ms: float
    def __init__(self, epoch: _Optional[int] = ..., response_id: _Optional[str] = ..., first_audio_ms: _Optional[float] = ...) -> None: ...

class Stage1Event(_message.Message):
    __slots__ = ("audio", "done", "error")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    audio: AudioChunk
    done: SynthesisDone
    error: StageError
    def __init__(self, audio: _Optional[_Union[AudioChunk, _Mapping]] = ..., done: _Optional[_Union[SynthesisDone, _Mapping]] = ..., error: _Optional[_Union[StageError, _Mapping]] = ...) -> None: ...
