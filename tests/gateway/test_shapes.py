"""The objects inside the duplex dialect's events (`shapes`): the session with
beta and GA spellings, responses, and items."""

from __future__ import annotations

import pytest
from openai.types.realtime.realtime_audio_input_turn_detection import SemanticVad

from antiphon.gateway.dialects.projector import project
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from tests.gateway import server_events as server


# ------------------------------------------------------------------ session
@pytest.mark.parametrize("kind", ["session_created", "session_updated"])
def test_session_object_carries_beta_and_ga_spellings(kind: str) -> None:
    wire = project(server.event(kind, server.state()))
    assert (wire["incarnation"], wire["attachment_generation"]) == (0, 1)
    assert wire["resume_token"] == "rt_3f9c"
    s = wire["session"]
    assert s["object"] == "realtime.session"
    assert s["type"] == "realtime"
    assert s["id"] == "sess_demo_01"
    # Beta and GA spellings side by side.
    assert s["modalities"] == s["output_modalities"] == ["audio", "text"]
    assert s["input_audio_format"] == "pcm16"
    assert s["output_audio_format"] == "pcm16"
    assert s["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 16000}
    assert s["audio"]["input"]["sample_rate_hz"] == 16000
    assert s["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert s["audio"]["output"]["voice"] == s["voice"] == "joe"
    td = {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
        "create_response": True,
        "interrupt_response": True,
    }
    assert s["turn_detection"] == s["audio"]["input"]["turn_detection"] == td
    # Duplex extensions.
    assert s["max_output_tokens"] == s["max_response_output_tokens"] == "inf"
    assert s["active_response_id"] is None
    assert s["playback"] == {"generated_ms": 0, "sent_ms": 0, "played_ms": 0, "committed_ms": 0}
    assert s["capabilities"]["implementation_level"] == "cascade"
    assert s["capabilities"]["input_modes"] == ["append_audio_chunk"]
    assert s["extra_body"] == {
        "native_duplex": True,
        "auto_response": True,
        "return_stage_metrics": False,
    }
    assert (s["overlap_policy"], s["playback_commit_policy"]) == ("listen_only", "ack_only")


def test_turn_detection_mode_none_projects_to_null() -> None:
    s = project(
        server.event(
            "session_updated",
            server.state(turn_detection=cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_NONE)),
        )
    )["session"]
    assert s["turn_detection"] is None
    assert s["audio"]["input"]["turn_detection"] is None


def test_semantic_vad_projects_in_openai_shape_and_validates_with_the_sdk() -> None:
    td = cpb.TurnDetection(
        mode=cpb.TURN_DETECTION_MODE_SEMANTIC_VAD,
        eagerness="high",
        create_response=True,
        interrupt_response=False,
    )
    wire = project(server.event("session_updated", server.state(turn_detection=td)))
    expected = {
        "type": "semantic_vad",
        "eagerness": "high",
        "create_response": True,
        "interrupt_response": False,
    }
    assert wire["session"]["turn_detection"] == expected
    assert wire["session"]["audio"]["input"]["turn_detection"] == expected
    SemanticVad.model_validate(expected)


def test_session_limits_project_as_numbers_when_set() -> None:
    s = project(server.event("session_created", server.state(max_output_tokens=64)))["session"]
    assert s["max_output_tokens"] == s["max_response_output_tokens"] == 64


def test_response_done_completed_has_null_status_details_and_the_ledger() -> None:
    wire = project(server.event("response_done", spb.ResponseEvent(response=server.response())))
    resp = wire["response"]
    assert resp["status"] == "completed"
    assert resp["status_details"] is None
    assert resp["metadata"]["committed"] is True
    assert resp["metadata"]["playback"] == {
        "generated_ms": 2400,
        "sent_ms": 2400,
        "played_ms": 1000,
        "committed_ms": 1000,
    }
    assert resp["output"][0]["content"] == [{"type": "output_audio", "transcript": "It is sunny."}]
    assert "stage_metrics" not in resp["metadata"]


def test_response_done_cancelled_has_typed_status_details() -> None:
    wire = project(
        server.event(
            "response_done", spb.ResponseEvent(response=server.response("cancelled", "barge_in"))
        )
    )
    assert wire["response"]["status_details"] == {"type": "cancelled", "reason": "barge_in"}


def test_stage_metrics_ride_response_metadata_only_when_asked() -> None:
    r = server.response()
    r.has_stage_metrics = True
    r.stage_metrics.CopyFrom(
        cpb.StageMetrics(ttft_ms=12.5, tpot_ms=3.0, itl_ms=[3.0, 4.0], num_generation_tokens=2)
    )
    m = project(server.event("response_done", spb.ResponseEvent(response=r)))["response"][
        "metadata"
    ]
    assert m["stage_metrics"]["vllm_ttft_ms"] == 12.5
    assert m["stage_metrics"]["vllm_itls_ms"] == [3.0, 4.0]
    assert m["stage_metrics"]["num_generation_tokens"] == 2


def test_function_call_items_carry_name_call_id_and_arguments_and_no_content() -> None:
    wire = project(
        server.event(
            "output_item_added",
            spb.OutputItemEvent(
                response_id="resp_fc_01", output_index=0, item=server.function_call()
            ),
        )
    )
    assert wire["item"] == {
        "id": "item_fc_01",
        "object": "realtime.item",
        "type": "function_call",
        "status": "completed",
        "name": "get_weather",
        "call_id": "call_7d1f",
        "arguments": '{"city":"Hong Kong"}',
    }


def test_function_call_output_items_carry_call_id_and_output() -> None:
    output = cpb.Item(
        id="item_out",
        type="function_call_output",
        status="completed",
        call_id="call_7d1f",
        output='{"temperature_c": 24}',
    )
    for kind in ("item_added", "item_created", "item_done"):
        wire = project(
            server.event(kind, spb.ItemEvent(previous_item_id="item_fc_01", item=output))
        )
        assert wire["item"] == {
            "id": "item_out",
            "object": "realtime.item",
            "type": "function_call_output",
            "status": "completed",
            "call_id": "call_7d1f",
            "output": '{"temperature_c": 24}',
        }
        assert wire["previous_item_id"] == "item_fc_01"
        type(server.sdk_parse(wire)).model_validate(wire)


def test_item_retrieved_carries_the_whole_item() -> None:
    wire = project(server.event("item_retrieved", spb.ItemRetrieved(item=server.assistant_item())))
    assert wire["item"] == {
        "id": "item_resp_01",
        "object": "realtime.item",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_audio", "transcript": "It is sunny."}],
    }
