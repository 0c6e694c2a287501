"""What a session's configuration decides, as pure functions of it.

When a response starts by itself, what happens to speech over an answer,
the options a response gets, and what stage0 is opened with: each is read
from the config at the moment it matters, so a `session.update` takes
effect at the next decision.
"""

from __future__ import annotations

from antiphon.session.actor.errors import invalid
from antiphon.session.assistant.responses import ResponseOptions
from antiphon.session.config import session_config, tools
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2

BARGE_IN = "barge_in_on_speech"
LISTEN_ONLY = "listen_only"


def auto_response(config: cpb.SessionConfig) -> bool:
    """Whether a sealed turn starts a response by itself."""
    lane = session_config.lane(config)
    if lane == stage_pb2.LANE_SERVER_VAD:
        return config.turn_detection.create_response
    if lane == stage_pb2.LANE_NATIVE:
        return config.auto_response
    return False


def overlap_policy(config: cpb.SessionConfig) -> str:
    """`barge_in_on_speech` when asked for, or implied by server VAD's `interrupt_response`."""
    td = config.turn_detection
    vad_interrupts = session_config.lane(config) == stage_pb2.LANE_SERVER_VAD and (
        td.interrupt_response if td.HasField("interrupt_response") else True
    )
    if config.overlap_policy == BARGE_IN or vad_interrupts:
        return BARGE_IN
    return LISTEN_ONLY


def default_options(config: cpb.SessionConfig, max_output_tokens: int) -> ResponseOptions:
    """A response's options when nothing overrides the session's."""
    return ResponseOptions(
        instructions=config.instructions,
        output_modalities=list(config.output_modalities),
        temperature=config.temperature,
        max_output_tokens=config.max_output_tokens or max_output_tokens,
        tools=list(config.tools),
        tool_choice=config.tool_choice,
    )


def requested_options(
    config: cpb.SessionConfig, req: spb.CreateResponse, ceiling: int
) -> ResponseOptions:
    """`response.create`'s own options over the session's; the token count
    never above the server's ceiling. Raises `Rejection` for tools that are wrong."""
    opts = default_options(config, ceiling)
    if req.HasField("instructions"):
        opts.instructions = req.instructions
    if req.output_modalities:
        opts.output_modalities = list(req.output_modalities)
    if req.HasField("temperature"):
        opts.temperature = req.temperature
    if req.HasField("max_output_tokens"):
        opts.max_output_tokens = min(req.max_output_tokens or ceiling, ceiling)
    if req.has_tools:
        opts.tools = list(req.tools)
    if req.HasField("tool_choice"):
        opts.tool_choice = req.tool_choice
    wrong = tools.problem(opts.tools, opts.tool_choice)
    if wrong is not None:
        message, param = wrong
        raise invalid("invalid_value", message, f"response.{param}")
    opts.metadata = dict(req.metadata)
    return opts


def stage0_open(
    session_id: str, config: cpb.SessionConfig, *, preemptive: bool = False
) -> stage_pb2.Stage0Open:
    """What stage0 is told of the session; `preemptive`: the server answers at
    the user's first pause, where the session answers by itself."""
    lane = session_config.lane(config)
    return stage_pb2.Stage0Open(
        session_id=session_id,
        lane=lane,
        turn_detection=config.turn_detection,
        # Push-to-talk that never barges in needs no VAD at all.
        skip_vad=lane == stage_pb2.LANE_MANUAL and overlap_policy(config) == LISTEN_ONLY,
        instructions=config.instructions,
        voice=config.voice,
        preemptive=preemptive and auto_response(config),
        # A model-native backend that calls tools puts them in its prompt.
        tools=config.tools,
    )


def stage1_open(session_id: str, config: cpb.SessionConfig) -> stage_pb2.Stage1Open:
    return stage_pb2.Stage1Open(
        session_id=session_id,
        voice=config.voice,
        sample_rate_hz=config.output_audio_format.sample_rate_hz,
        speed=config.speed or 1.0,
    )
