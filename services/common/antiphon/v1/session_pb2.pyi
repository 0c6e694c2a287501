from antiphon.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpenSession(_message.Message):
    __slots__ = ("config", "on_connect")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ON_CONNECT_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.SessionConfigPatch
    on_connect: bool
    def __init__(self, config: _Optional[_Union[_common_pb2.SessionConfigPatch, _Mapping]] = ..., on_connect: _Optional[bool] = ...) -> None: ...

class UpdateSession(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.SessionConfigPatch
    def __init__(self, config: _Optional[_Union[_common_pb2.SessionConfigPatch, _Mapping]] = ...) -> None: ...

class AppendAudio(_message.Message):
    __slots__ = ("pcm16", "is_speech", "sample_rate_hz", "video_frames", "max_slice_nums")
    PCM16_FIELD_NUMBER: _ClassVar[int]
    IS_SPEECH_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    VIDEO_FRAMES_FIELD_NUMBER: _ClassVar[int]
    MAX_SLICE_NUMS_FIELD_NUMBER: _ClassVar[int]
    pcm16: bytes
    is_speech: bool
    sample_rate_hz: int
    video_frames: _containers.RepeatedScalarFieldContainer[bytes]
    max_slice_nums: int
    def __init__(self, pcm16: _Optional[bytes] = ..., is_speech: _Optional[bool] = ..., sample_rate_hz: _Optional[int] = ..., video_frames: _Optional[_Iterable[bytes]] = ..., max_slice_nums: _Optional[int] = ...) -> None: ...

class CommitInput(_message.Message):
    __slots__ = ("is_speech",)
    IS_SPEECH_FIELD_NUMBER: _ClassVar[int]
    is_speech: bool
    def __init__(self, is_speech: _Optional[bool] = ...) -> None: ...

class ClearInput(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CreateResponse(_message.Message):
    __slots__ = ("instructions", "output_modalities", "temperature", "max_output_tokens", "metadata", "tools", "has_tools", "tool_choice", "delegated")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    HAS_TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    DELEGATED_FIELD_NUMBER: _ClassVar[int]
    instructions: str
    output_modalities: _containers.RepeatedScalarFieldContainer[str]
    temperature: float
    max_output_tokens: int
    metadata: _containers.ScalarMap[str, str]
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.Tool]
    has_tools: bool
    tool_choice: _common_pb2.ToolChoice
    delegated: bool
    def __init__(self, instructions: _Optional[str] = ..., output_modalities: _Optional[_Iterable[str]] = ..., temperature: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.Tool, _Mapping]]] = ..., has_tools: _Optional[bool] = ..., tool_choice: _Optional[_Union[_common_pb2.ToolChoice, _Mapping]] = ..., delegated: _Optional[bool] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("response_id",)
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    def __init__(self, response_id: _Optional[str] = ...) -> None: ...

class CloseSession(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResumeSession(_message.Message):
    __slots__ = ("session_id", "incarnation", "resume_token", "last_received_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LAST_RECEIVED_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    incarnation: int
    resume_token: str
    last_received_seq: int
    def __init__(self, session_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., resume_token: _Optional[str] = ..., last_received_seq: _Optional[int] = ...) -> None: ...

class EventAck(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class CancelInput(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AppendText(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class CreateItem(_message.Message):
    __slots__ = ("item", "previous_item_id")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    item: _common_pb2.Item
    previous_item_id: str
    def __init__(self, item: _Optional[_Union[_common_pb2.Item, _Mapping]] = ..., previous_item_id: _Optional[str] = ...) -> None: ...

class ItemRef(_message.Message):
    __slots__ = ("item_id",)
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    def __init__(self, item_id: _Optional[str] = ...) -> None: ...

class TruncateItem(_message.Message):
    __slots__ = ("item_id", "content_index", "audio_end_ms")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    content_index: int
    audio_end_ms: int
    def __init__(self, item_id: _Optional[str] = ..., content_index: _Optional[int] = ..., audio_end_ms: _Optional[int] = ...) -> None: ...

class ClearOutputAudio(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BargeIn(_message.Message):
    __slots__ = ("source",)
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    source: str
    def __init__(self, source: _Optional[str] = ...) -> None: ...

class PlaybackAck(_message.Message):
    __slots__ = ("response_id", "item_id", "played_ms", "committed_ms", "truncate")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    PLAYED_MS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    item_id: str
    played_ms: int
    committed_ms: int
    truncate: bool
    def __init__(self, response_id: _Optional[str] = ..., item_id: _Optional[str] = ..., played_ms: _Optional[int] = ..., committed_ms: _Optional[int] = ..., truncate: _Optional[bool] = ...) -> None: ...

class ClientGone(_message.Message):
    __slots__ = ("clean", "close_code")
    CLEAN_FIELD_NUMBER: _ClassVar[int]
    CLOSE_CODE_FIELD_NUMBER: _ClassVar[int]
    clean: bool
    close_code: int
    def __init__(self, clean: _Optional[bool] = ..., close_code: _Optional[int] = ...) -> None: ...

class AppendContext(_message.Message):
    __slots__ = ("channel", "text", "delegation_id")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_ID_FIELD_NUMBER: _ClassVar[int]
    channel: str
    text: str
    delegation_id: str
    def __init__(self, channel: _Optional[str] = ..., text: _Optional[str] = ..., delegation_id: _Optional[str] = ...) -> None: ...

class ClientCommand(_message.Message):
    __slots__ = ("event_id", "operation_id", "client_type", "open", "update", "append_audio", "commit", "clear_input", "create_response", "cancel_response", "close", "heartbeat", "rejected", "resume", "event_ack", "cancel_input", "append_text", "create_item", "retrieve_item", "delete_item", "truncate_item", "clear_output_audio", "barge_in", "playback_ack", "client_gone", "append_context")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    APPEND_AUDIO_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    CLEAR_INPUT_FIELD_NUMBER: _ClassVar[int]
    CREATE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    EVENT_ACK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_INPUT_FIELD_NUMBER: _ClassVar[int]
    APPEND_TEXT_FIELD_NUMBER: _ClassVar[int]
    CREATE_ITEM_FIELD_NUMBER: _ClassVar[int]
    RETRIEVE_ITEM_FIELD_NUMBER: _ClassVar[int]
    DELETE_ITEM_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_ITEM_FIELD_NUMBER: _ClassVar[int]
    CLEAR_OUTPUT_AUDIO_FIELD_NUMBER: _ClassVar[int]
    BARGE_IN_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_ACK_FIELD_NUMBER: _ClassVar[int]
    CLIENT_GONE_FIELD_NUMBER: _ClassVar[int]
    APPEND_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    operation_id: str
    client_type: str
    open: OpenSession
    update: UpdateSession
    append_audio: AppendAudio
    commit: CommitInput
    clear_input: ClearInput
    create_response: CreateResponse
    cancel_response: CancelResponse
    close: CloseSession
    heartbeat: Heartbeat
    rejected: ErrorEvent
    resume: ResumeSession
    event_ack: EventAck
    cancel_input: CancelInput
    append_text: AppendText
    create_item: CreateItem
    retrieve_item: ItemRef
    delete_item: ItemRef
    truncate_item: TruncateItem
    clear_output_audio: ClearOutputAudio
    barge_in: BargeIn
    playback_ack: PlaybackAck
    client_gone: ClientGone
    append_context: AppendContext
    def __init__(self, event_id: _Optional[str] = ..., operation_id: _Optional[str] = ..., client_type: _Optional[str] = ..., open: _Optional[_Union[OpenSession, _Mapping]] = ..., update: _Optional[_Union[UpdateSession, _Mapping]] = ..., append_audio: _Optional[_Union[AppendAudio, _Mapping]] = ..., commit: _Optional[_Union[CommitInput, _Mapping]] = ..., clear_input: _Optional[_Union[ClearInput, _Mapping]] = ..., create_response: _Optional[_Union[CreateResponse, _Mapping]] = ..., cancel_response: _Optional[_Union[CancelResponse, _Mapping]] = ..., close: _Optional[_Union[CloseSession, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., rejected: _Optional[_Union[ErrorEvent, _Mapping]] = ..., resume: _Optional[_Union[ResumeSession, _Mapping]] = ..., event_ack: _Optional[_Union[EventAck, _Mapping]] = ..., cancel_input: _Optional[_Union[CancelInput, _Mapping]] = ..., append_text: _Optional[_Union[AppendText, _Mapping]] = ..., create_item: _Optional[_Union[CreateItem, _Mapping]] = ..., retrieve_item: _Optional[_Union[ItemRef, _Mapping]] = ..., delete_item: _Optional[_Union[ItemRef, _Mapping]] = ..., truncate_item: _Optional[_Union[TruncateItem, _Mapping]] = ..., clear_output_audio: _Optional[_Union[ClearOutputAudio, _Mapping]] = ..., barge_in: _Optional[_Union[BargeIn, _Mapping]] = ..., playback_ack: _Optional[_Union[PlaybackAck, _Mapping]] = ..., client_gone: _Optional[_Union[ClientGone, _Mapping]] = ..., append_context: _Optional[_Union[AppendContext, _Mapping]] = ...) -> None: ...

class SessionState(_message.Message):
    __slots__ = ("config", "session_id", "incarnation", "attachment_generation", "resume_token", "epoch", "turn_id", "state", "active_response_id", "playback", "capabilities", "expires_at")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.SessionConfig
    session_id: str
    incarnation: int
    attachment_generation: int
    resume_token: str
    epoch: int
    turn_id: int
    state: str
    active_response_id: str
    playback: _common_pb2.Playback
    capabilities: _common_pb2.Capabilities
    expires_at: int
    def __init__(self, config: _Optional[_Union[_common_pb2.SessionConfig, _Mapping]] = ..., session_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., attachment_generation: _Optional[int] = ..., resume_token: _Optional[str] = ..., epoch: _Optional[int] = ..., turn_id: _Optional[int] = ..., state: _Optional[str] = ..., active_response_id: _Optional[str] = ..., playback: _Optional[_Union[_common_pb2.Playback, _Mapping]] = ..., capabilities: _Optional[_Union[_common_pb2.Capabilities, _Mapping]] = ..., expires_at: _Optional[int] = ...) -> None: ...

class SessionClosed(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class HeartbeatAck(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class SessionResumed(_message.Message):
    __slots__ = ("session_id", "incarnation", "attachment_generation", "resume_token", "session")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    incarnation: int
    attachment_generation: int
    resume_token: str
    session: SessionState
    def __init__(self, session_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., attachment_generation: _Optional[int] = ..., resume_token: _Optional[str] = ..., session: _Optional[_Union[SessionState, _Mapping]] = ...) -> None: ...

class SessionReplaced(_message.Message):
    __slots__ = ("session_id", "attachment_generation")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    attachment_generation: int
    def __init__(self, session_id: _Optional[str] = ..., attachment_generation: _Optional[int] = ...) -> None: ...

class SessionExpired(_message.Message):
    __slots__ = ("session_id", "incarnation", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    incarnation: int
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ResyncRequired(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ErrorEvent(_message.Message):
    __slots__ = ("type", "code", "message", "event_id", "param", "client_type")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    type: str
    code: str
    message: str
    event_id: str
    param: str
    client_type: str
    def __init__(self, type: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., event_id: _Optional[str] = ..., param: _Optional[str] = ..., client_type: _Optional[str] = ...) -> None: ...

class SpeechStarted(_message.Message):
    __slots__ = ("audio_start_ms", "item_id")
    AUDIO_START_MS_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    audio_start_ms: int
    item_id: str
    def __init__(self, audio_start_ms: _Optional[int] = ..., item_id: _Optional[str] = ...) -> None: ...

class SpeechStopped(_message.Message):
    __slots__ = ("audio_end_ms", "item_id")
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    audio_end_ms: int
    item_id: str
    def __init__(self, audio_end_ms: _Optional[int] = ..., item_id: _Optional[str] = ...) -> None: ...

class InputCommitted(_message.Message):
    __slots__ = ("previous_item_id", "item_id", "turn_id", "epoch", "history_len", "response_create_deferred", "session_id")
    PREVIOUS_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HISTORY_LEN_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_CREATE_DEFERRED_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    previous_item_id: str
    item_id: str
    turn_id: int
    epoch: int
    history_len: int
    response_create_deferred: bool
    session_id: str
    def __init__(self, previous_item_id: _Optional[str] = ..., item_id: _Optional[str] = ..., turn_id: _Optional[int] = ..., epoch: _Optional[int] = ..., history_len: _Optional[int] = ..., response_create_deferred: _Optional[bool] = ..., session_id: _Optional[str] = ...) -> None: ...

class InputCleared(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ItemEvent(_message.Message):
    __slots__ = ("previous_item_id", "item")
    PREVIOUS_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    previous_item_id: str
    item: _common_pb2.Item
    def __init__(self, previous_item_id: _Optional[str] = ..., item: _Optional[_Union[_common_pb2.Item, _Mapping]] = ...) -> None: ...

class TranscriptionCompleted(_message.Message):
    __slots__ = ("item_id", "content_index", "transcript")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    content_index: int
    transcript: str
    def __init__(self, item_id: _Optional[str] = ..., content_index: _Optional[int] = ..., transcript: _Optional[str] = ...) -> None: ...

class TranscriptionDelta(_message.Message):
    __slots__ = ("item_id", "content_index", "delta")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    content_index: int
    delta: str
    def __init__(self, item_id: _Optional[str] = ..., content_index: _Optional[int] = ..., delta: _Optional[str] = ...) -> None: ...

class Response(_message.Message):
    __slots__ = ("id", "status", "status_reason", "output", "output_modalities", "epoch", "turn_id", "playback", "metadata", "stage_metrics", "has_stage_metrics", "session_id", "committed", "delegated")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_REASON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    STAGE_METRICS_FIELD_NUMBER: _ClassVar[int]
    HAS_STAGE_METRICS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    DELEGATED_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: str
    status_reason: str
    output: _containers.RepeatedCompositeFieldContainer[_common_pb2.Item]
    output_modalities: _containers.RepeatedScalarFieldContainer[str]
    epoch: int
    turn_id: int
    playback: _common_pb2.Playback
    metadata: _containers.ScalarMap[str, str]
    stage_metrics: _common_pb2.StageMetrics
    has_stage_metrics: bool
    session_id: str
    committed: bool
    delegated: bool
    def __init__(self, id: _Optional[str] = ..., status: _Optional[str] = ..., status_reason: _Optional[str] = ..., output: _Optional[_Iterable[_Union[_common_pb2.Item, _Mapping]]] = ..., output_modalities: _Optional[_Iterable[str]] = ..., epoch: _Optional[int] = ..., turn_id: _Optional[int] = ..., playback: _Optional[_Union[_common_pb2.Playback, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., stage_metrics: _Optional[_Union[_common_pb2.StageMetrics, _Mapping]] = ..., has_stage_metrics: _Optional[bool] = ..., session_id: _Optional[str] = ..., committed: _Optional[bool] = ..., delegated: _Optional[bool] = ...) -> None: ...

class ResponseEvent(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: Response
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ...) -> None: ...

class PartRef(_message.Message):
    __slots__ = ("response_id", "item_id", "output_index", "content_index")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    def __init__(self, response_id: _Optional[str] = ..., item_id: _Optional[str] = ..., output_index: _Optional[int] = ..., content_index: _Optional[int] = ...) -> None: ...

class OutputItemEvent(_message.Message):
    __slots__ = ("response_id", "output_index", "item")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_INDEX_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    output_index: int
    item: _common_pb2.Item
    def __init__(self, response_id: _Optional[str] = ..., output_index: _Optional[int] = ..., item: _Optional[_Union[_common_pb2.Item, _Mapping]] = ...) -> None: ...

class ContentPartEvent(_message.Message):
    __slots__ = ("ref", "part")
    REF_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    ref: PartRef
    part: _common_pb2.ContentPart
    def __init__(self, ref: _Optional[_Union[PartRef, _Mapping]] = ..., part: _Optional[_Union[_common_pb2.ContentPart, _Mapping]] = ...) -> None: ...

class Speak(_message.Message):
    __slots__ = ("ref", "session_id", "epoch")
    REF_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ref: PartRef
    session_id: str
    epoch: int
    def __init__(self, ref: _Optional[_Union[PartRef, _Mapping]] = ..., session_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class AudioDelta(_message.Message):
    __slots__ = ("ref", "audio", "session_id", "epoch", "end_of_turn", "audio_duration_ms", "marks", "playback", "format")
    REF_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_OF_TURN_FIELD_NUMBER: _ClassVar[int]
    AUDIO_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    MARKS_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    ref: PartRef
    audio: bytes
    session_id: str
    epoch: int
    end_of_turn: bool
    audio_duration_ms: int
    marks: _containers.RepeatedCompositeFieldContainer[_common_pb2.AudioTextMark]
    playback: _common_pb2.Playback
    format: _common_pb2.AudioFormat
    def __init__(self, ref: _Optional[_Union[PartRef, _Mapping]] = ..., audio: _Optional[bytes] = ..., session_id: _Optional[str] = ..., epoch: _Optional[int] = ..., end_of_turn: _Optional[bool] = ..., audio_duration_ms: _Optional[int] = ..., marks: _Optional[_Iterable[_Union[_common_pb2.AudioTextMark, _Mapping]]] = ..., playback: _Optional[_Union[_common_pb2.Playback, _Mapping]] = ..., format: _Optional[_Union[_common_pb2.AudioFormat, _Mapping]] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("ref", "delta")
    REF_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    ref: PartRef
    delta: str
    def __init__(self, ref: _Optional[_Union[PartRef, _Mapping]] = ..., delta: _Optional[str] = ...) -> None: ...

class TextDone(_message.Message):
    __slots__ = ("ref", "text")
    REF_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ref: PartRef
    text: str
    def __init__(self, ref: _Optional[_Union[PartRef, _Mapping]] = ..., text: _Optional[str] = ...) -> None: ...

class PartDone(_message.Message):
    __slots__ = ("ref",)
    REF_FIELD_NUMBER: _ClassVar[int]
    ref: PartRef
    def __init__(self, ref: _Optional[_Union[PartRef, _Mapping]] = ...) -> None: ...

class Listen(_message.Message):
    __slots__ = ("session_id", "epoch", "reason", "response_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    epoch: int
    reason: str
    response_id: str
    def __init__(self, session_id: _Optional[str] = ..., epoch: _Optional[int] = ..., reason: _Optional[str] = ..., response_id: _Optional[str] = ...) -> None: ...

class RateLimitsUpdated(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ItemDeleted(_message.Message):
    __slots__ = ("item_id",)
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    def __init__(self, item_id: _Optional[str] = ...) -> None: ...

class ItemRetrieved(_message.Message):
    __slots__ = ("item",)
    ITEM_FIELD_NUMBER: _ClassVar[int]
    item: _common_pb2.Item
    def __init__(self, item: _Optional[_Union[_common_pb2.Item, _Mapping]] = ...) -> None: ...

class ItemTruncated(_message.Message):
    __slots__ = ("item_id", "content_index", "audio_end_ms", "transcript")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    content_index: int
    audio_end_ms: int
    transcript: str
    def __init__(self, item_id: _Optional[str] = ..., content_index: _Optional[int] = ..., audio_end_ms: _Optional[int] = ..., transcript: _Optional[str] = ...) -> None: ...

class OutputAudioCleared(_message.Message):
    __slots__ = ("response_id",)
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    def __init__(self, response_id: _Optional[str] = ...) -> None: ...

class PlaybackAcknowledged(_message.Message):
    __slots__ = ("session_id", "epoch", "response_id", "item_id", "played_ms", "committed_ms", "truncate", "playback", "history_committed")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    PLAYED_MS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_FIELD_NUMBER: _ClassVar[int]
    HISTORY_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    epoch: int
    response_id: str
    item_id: str
    played_ms: int
    committed_ms: int
    truncate: bool
    playback: _common_pb2.Playback
    history_committed: bool
    def __init__(self, session_id: _Optional[str] = ..., epoch: _Optional[int] = ..., response_id: _Optional[str] = ..., item_id: _Optional[str] = ..., played_ms: _Optional[int] = ..., committed_ms: _Optional[int] = ..., truncate: _Optional[bool] = ..., playback: _Optional[_Union[_common_pb2.Playback, _Mapping]] = ..., history_committed: _Optional[bool] = ...) -> None: ...

class OverlapDecision(_message.Message):
    __slots__ = ("session_id", "epoch", "policy", "action", "reason", "overlap_ms", "buffer_audio", "defer_runtime_append", "force_listen")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_MS_FIELD_NUMBER: _ClassVar[int]
    BUFFER_AUDIO_FIELD_NUMBER: _ClassVar[int]
    DEFER_RUNTIME_APPEND_FIELD_NUMBER: _ClassVar[int]
    FORCE_LISTEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    epoch: int
    policy: str
    action: str
    reason: str
    overlap_ms: int
    buffer_audio: bool
    defer_runtime_append: bool
    force_listen: bool
    def __init__(self, session_id: _Optional[str] = ..., epoch: _Optional[int] = ..., policy: _Optional[str] = ..., action: _Optional[str] = ..., reason: _Optional[str] = ..., overlap_ms: _Optional[int] = ..., buffer_audio: _Optional[bool] = ..., defer_runtime_append: _Optional[bool] = ..., force_listen: _Optional[bool] = ...) -> None: ...

class InputCancelled(_message.Message):
    __slots__ = ("session_id", "epoch")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    epoch: int
    def __init__(self, session_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class FunctionCallArguments(_message.Message):
    __slots__ = ("ref", "call_id", "arguments", "name")
    REF_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ref: PartRef
    call_id: str
    arguments: str
    name: str
    def __init__(self, ref: _Optional[_Union[PartRef, _Mapping]] = ..., call_id: _Optional[str] = ..., arguments: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class MalformedFunctionCall(_message.Message):
    __slots__ = ("session_id", "epoch", "response_id", "name", "arguments")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    epoch: int
    response_id: str
    name: str
    arguments: str
    def __init__(self, session_id: _Optional[str] = ..., epoch: _Optional[int] = ..., response_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ContextAppended(_message.Message):
    __slots__ = ("channel", "client_event_id", "frame_index")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    FRAME_INDEX_FIELD_NUMBER: _ClassVar[int]
    channel: str
    client_event_id: str
    frame_index: int
    def __init__(self, channel: _Optional[str] = ..., client_event_id: _Optional[str] = ..., frame_index: _Optional[int] = ...) -> None: ...

class ServerEvent(_message.Message):
    __slots__ = ("seq", "event_id", "session_created", "session_updated", "session_closed", "heartbeat_ack", "error", "session_resumed", "session_replaced", "session_expired", "resync_required", "speech_started", "speech_stopped", "input_committed", "input_cleared", "item_added", "item_created", "item_done", "transcription_completed", "response_created", "output_item_added", "content_part_added", "response_speak", "audio_delta", "audio_transcript_delta", "text_delta", "audio_done", "audio_transcript_done", "text_done", "content_part_done", "output_item_done", "response_done", "rate_limits_updated", "response_listen", "item_deleted", "item_retrieved", "item_truncated", "output_audio_cleared", "playback_acknowledged", "overlap_decision", "input_cancelled", "function_call_arguments_delta", "function_call_arguments_done", "function_call_malformed", "transcription_delta", "context_appended")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_CREATED_FIELD_NUMBER: _ClassVar[int]
    SESSION_UPDATED_FIELD_NUMBER: _ClassVar[int]
    SESSION_CLOSED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_ACK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SESSION_RESUMED_FIELD_NUMBER: _ClassVar[int]
    SESSION_REPLACED_FIELD_NUMBER: _ClassVar[int]
    SESSION_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    RESYNC_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    SPEECH_STARTED_FIELD_NUMBER: _ClassVar[int]
    SPEECH_STOPPED_FIELD_NUMBER: _ClassVar[int]
    INPUT_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    INPUT_CLEARED_FIELD_NUMBER: _ClassVar[int]
    ITEM_ADDED_FIELD_NUMBER: _ClassVar[int]
    ITEM_CREATED_FIELD_NUMBER: _ClassVar[int]
    ITEM_DONE_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPTION_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_CREATED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_ITEM_ADDED_FIELD_NUMBER: _ClassVar[int]
    CONTENT_PART_ADDED_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_SPEAK_FIELD_NUMBER: _ClassVar[int]
    AUDIO_DELTA_FIELD_NUMBER: _ClassVar[int]
    AUDIO_TRANSCRIPT_DELTA_FIELD_NUMBER: _ClassVar[int]
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    AUDIO_DONE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_TRANSCRIPT_DONE_FIELD_NUMBER: _ClassVar[int]
    TEXT_DONE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_PART_DONE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_ITEM_DONE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_DONE_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITS_UPDATED_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_LISTEN_FIELD_NUMBER: _ClassVar[int]
    ITEM_DELETED_FIELD_NUMBER: _ClassVar[int]
    ITEM_RETRIEVED_FIELD_NUMBER: _ClassVar[int]
    ITEM_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_AUDIO_CLEARED_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_ACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_DECISION_FIELD_NUMBER: _ClassVar[int]
    INPUT_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_CALL_ARGUMENTS_DELTA_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_CALL_ARGUMENTS_DONE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_CALL_MALFORMED_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPTION_DELTA_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_APPENDED_FIELD_NUMBER: _ClassVar[int]
    seq: int
    event_id: str
    session_created: SessionState
    session_updated: SessionState
    session_closed: SessionClosed
    heartbeat_ack: HeartbeatAck
    error: ErrorEvent
    session_resumed: SessionResumed
    session_replaced: SessionReplaced
    session_expired: SessionExpired
    resync_required: ResyncRequired
    speech_started: SpeechStarted
    speech_stopped: SpeechStopped
    input_committed: InputCommitted
    input_cleared: InputCleared
    item_added: ItemEvent
    item_created: ItemEvent
    item_done: ItemEvent
    transcription_completed: TranscriptionCompleted
    response_created: ResponseEvent
    output_item_added: OutputItemEvent
    content_part_added: ContentPartEvent
    response_speak: Speak
    audio_delta: AudioDelta
    audio_transcript_delta: TextDelta
    text_delta: TextDelta
    audio_done: PartDone
    audio_transcript_done: TextDone
    text_done: TextDone
    content_part_done: ContentPartEvent
    output_item_done: OutputItemEvent
    response_done: ResponseEvent
    rate_limits_updated: RateLimitsUpdated
    response_listen: Listen
    item_deleted: ItemDeleted
    item_retrieved: ItemRetrieved
    item_truncated: ItemTruncated
    output_audio_cleared: OutputAudioCleared
    playback_acknowledged: PlaybackAcknowledged
    overlap_decision: OverlapDecision
    input_cancelled: InputCancelled
    function_call_arguments_delta: FunctionCallArguments
    function_call_arguments_done: FunctionCallArguments
    function_call_malformed: MalformedFunctionCall
    transcription_delta: TranscriptionDelta
    context_appended: ContextAppended
    def __init__(self, seq: _Optional[int] = ..., event_id: _Optional[str] = ..., session_created: _Optional[_Union[SessionState, _Mapping]] = ..., session_updated: _Optional[_Union[SessionState, _Mapping]] = ..., session_closed: _Optional[_Union[SessionClosed, _Mapping]] = ..., heartbeat_ack: _Optional[_Union[HeartbeatAck, _Mapping]] = ..., error: _Optional[_Union[ErrorEvent, _Mapping]] = ..., session_resumed: _Optional[_Union[SessionResumed, _Mapping]] = ..., session_replaced: _Optional[_Union[SessionReplaced, _Mapping]] = ..., session_expired: _Optional[_Union[SessionExpired, _Mapping]] = ..., resync_required: _Optional[_Union[ResyncRequired, _Mapping]] = ..., speech_started: _Optional[_Union[SpeechStarted, _Mapping]] = ..., speech_stopped: _Optional[_Union[SpeechStopped, _Mapping]] = ..., input_committed: _Optional[_Union[InputCommitted, _Mapping]] = ..., input_cleared: _Optional[_Union[InputCleared, _Mapping]] = ..., item_added: _Optional[_Union[ItemEvent, _Mapping]] = ..., item_created: _Optional[_Union[ItemEvent, _Mapping]] = ..., item_done: _Optional[_Union[ItemEvent, _Mapping]] = ..., transcription_completed: _Optional[_Union[TranscriptionCompleted, _Mapping]] = ..., response_created: _Optional[_Union[ResponseEvent, _Mapping]] = ..., output_item_added: _Optional[_Union[OutputItemEvent, _Mapping]] = ..., content_part_added: _Optional[_Union[ContentPartEvent, _Mapping]] = ..., response_speak: _Optional[_Union[Speak, _Mapping]] = ..., audio_delta: _Optional[_Union[AudioDelta, _Mapping]] = ..., audio_transcript_delta: _Optional[_Union[TextDelta, _Mapping]] = ..., text_delta: _Optional[_Union[TextDelta, _Mapping]] = ..., audio_done: _Optional[_Union[PartDone, _Mapping]] = ..., audio_transcript_done: _Optional[_Union[TextDone, _Mapping]] = ..., text_done: _Optional[_Union[TextDone, _Mapping]] = ..., content_part_done: _Optional[_Union[ContentPartEvent, _Mapping]] = ..., output_item_done: _Optional[_Union[OutputItemEvent, _Mapping]] = ..., response_done: _Optional[_Union[ResponseEvent, _Mapping]] = ..., rate_limits_updated: _Optional[_Union[RateLimitsUpdated, _Mapping]] = ..., response_listen: _Optional[_Union[Listen, _Mapping]] = ..., item_deleted: _Optional[_Union[ItemDeleted, _Mapping]] = ..., item_retrieved: _Optional[_Union[ItemRetrieved, _Mapping]] = ..., item_truncated: _Optional[_Union[ItemTruncated, _Mapping]] = ..., output_audio_cleared: _Optional[_Union[OutputAudioCleared, _Mapping]] = ..., playback_acknowledged: _Optional[_Union[PlaybackAcknowledged, _Mapping]] = ..., overlap_decision: _Optional[_Union[OverlapDecision, _Mapping]] = ..., input_cancelled: _Optional[_Union[InputCancelled, _Mapping]] = ..., function_call_arguments_delta: _Optional[_Union[FunctionCallArguments, _Mapping]] = ..., function_call_arguments_done: _Optional[_Union[FunctionCallArguments, _Mapping]] = ..., function_call_malformed: _Optional[_Union[MalformedFunctionCall, _Mapping]] = ..., transcription_delta: _Optional[_Union[TranscriptionDelta, _Mapping]] = ..., context_appended: _Optional[_Union[ContextAppended, _Mapping]] = ...) -> None: ...
