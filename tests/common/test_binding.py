"""serve_binding over a real gRPC stream: results the writer has not sent yet are merged
by the stage's hook (none without one), and a backlog past MAX_PENDING_RESULTS ends the
stream after it, RESOURCE_EXHAUSTED and counted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge

from antiphon.common.binding import MAX_PENDING_RESULTS, ActiveSessions, serve_binding
from antiphon.common.outbox import Merge
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc


def text_of_one_response(last: pb.Stage0Event, new: pb.Stage0Event) -> pb.Stage0Event | None:
    if last.WhichOneof("kind") != "delta" or new.WhichOneof("kind") != "delta":
        return None
    if last.delta.response_id != new.delta.response_id:
        return None
    last.delta.text += new.delta.text
    return last


class Burst:
    """Answers a generate with `max_output_tokens` deltas at once (all emitted before
    the writer runs), then done; their response ids take turns when `alternate`."""

    def __init__(self, emit: Callable[[pb.Stage0Event], None], *, alternate: bool) -> None:
        self._emit = emit
        self._alternate = alternate

    def handle(self, req: pb.Stage0Request) -> None:
        g = req.generate
        for i in range(g.max_output_tokens):
            rid = f"{g.response_id}-{i % 2}" if self._alternate else g.response_id
            self._emit(pb.Stage0Event(delta=pb.GenerationDelta(response_id=rid, text=f"w{i} ")))
        self._emit(pb.Stage0Event(done=pb.GenerationDone(response_id=g.response_id)))

    async def close(self) -> None:
        return None


class BurstStage(stage_pb2_grpc.Stage0ServiceServicer):
    def __init__(self, merge: Merge[pb.Stage0Event] | None, *, alternate: bool = False) -> None:
        registry = CollectorRegistry()
        gauge = Gauge("sessions", "bound", registry=registry)
        self.overflows = Counter("overflows", "ended", registry=registry)
        self._active = ActiveSessions(gauge, capacity=4, overflows=self.overflows)
        self._merge = merge
        self._alternate = alternate

    async def Bind(
        self, request_iterator: AsyncIterator[pb.Stage0Request], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.Stage0Event]:
        def session(emit: Callable[[pb.Stage0Event], None]) -> Burst:
            return Burst(emit, alternate=self._alternate)

        async for event in serve_binding(
            request_iterator,
            session,
            context=context,
            active=self._active,
            span_name="test.bind",
            merge=self._merge,
        ):
            yield event


async def answer(
    stage: BurstStage, words: int, ends: grpc.StatusCode = grpc.StatusCode.OK
) -> list[pb.Stage0Event]:
    """Everything the stream carries for one generate of `words` deltas, to its
    end, which must be with status `ends`."""
    server = grpc.aio.server()
    stage_pb2_grpc.add_Stage0ServiceServicer_to_server(stage, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            ask = pb.Generate(response_id="r", max_output_tokens=words)
            call = stage_pb2_grpc.Stage0ServiceStub(ch).Bind(iter([pb.Stage0Request(generate=ask)]))
            events: list[pb.Stage0Event] = []
            try:
                async for event in call:
                    events.append(event)
            except grpc.aio.AioRpcError:
                pass
            assert await call.code() == ends
            return events
    finally:
        await server.stop(None)


def deltas(events: list[pb.Stage0Event]) -> list[pb.GenerationDelta]:
    return [e.delta for e in events if e.WhichOneof("kind") == "delta"]


async def test_deltas_that_wait_unsent_go_as_one_with_all_their_text() -> None:
    events = await answer(BurstStage(text_of_one_response), 500)
    assert [d.text for d in deltas(events)] == ["".join(f"w{i} " for i in range(500))]
    assert events[-1].WhichOneof("kind") == "done"


async def test_without_a_hook_every_result_is_a_message() -> None:
    events = await answer(BurstStage(None), 500)
    assert [d.text for d in deltas(events)] == [f"w{i} " for i in range(500)]
    assert events[-1].WhichOneof("kind") == "done"


async def test_a_backlog_past_the_limit_ends_the_stream_after_it() -> None:
    """Deltas of two responses in turn never merge: the limit counts each."""
    stage = BurstStage(text_of_one_response, alternate=True)
    events = await answer(stage, MAX_PENDING_RESULTS + 10, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert stage.overflows._value.get() == 1
    assert len(events) == MAX_PENDING_RESULTS
    assert [d.text for d in deltas(events)] == [f"w{i} " for i in range(MAX_PENDING_RESULTS)]


async def test_merged_results_do_not_fill_the_backlog() -> None:
    events = await answer(BurstStage(text_of_one_response), 3 * MAX_PENDING_RESULTS)
    assert len(deltas(events)) == 1
    assert events[-1].WhichOneof("kind") == "done"
