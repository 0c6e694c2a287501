"""The gRPC face of the session service: one `Connect` stream per connection.

The first command opens or resumes a session; the rest go into the session
actor's mailbox, tagged with this stream's attachment generation, in the
order they arrived. Events flow back from the actor's outbound queue. The
gateway says when its client's socket closed (`client_gone`: a goodbye ends
the session unless it is resumable); a stream that ends without that word
only detaches: the session lives on, resumable, for its grace period.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from opentelemetry import trace

from antiphon.common import tracing
from antiphon.common.ids import new_id
from antiphon.session.actor import mail
from antiphon.session.actor.actor import SessionActor
from antiphon.session.actor.errors import Rejection, invalid
from antiphon.session.registry import Attached, SessionRegistry
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import session_pb2_grpc

tracer = trace.get_tracer("antiphon.session")


class SessionService(session_pb2_grpc.SessionServiceServicer):
    def __init__(self, registry: SessionRegistry) -> None:
        self._registry = registry

    async def Connect(
        self,
        request_iterator: AsyncIterator[spb.ClientCommand],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[spb.ServerEvent]:
        parent = tracing.extract_metadata(context.invocation_metadata())
        commands = aiter(request_iterator)
        first = await anext(commands, None)
        if first is None:
            return
        with tracer.start_as_current_span("session.attach", context=parent):
            try:
                actor, outbound, generation = await self._attach(first)
            except Rejection as refused:
                # Nothing was journaled for a refused handshake: seq 0 marks it.
                error = refused.event(first.event_id)
                yield spb.ServerEvent(seq=0, event_id=new_id("event"), error=error)
                return
        pump = asyncio.create_task(self._pump(commands, actor, generation))
        try:
            while (event := await outbound.get()) is not None:
                yield event
        finally:
            pump.cancel()
            actor.post(mail.Detached(generation))

    async def _attach(self, first: spb.ClientCommand) -> Attached:
        kind = first.WhichOneof("kind")
        if kind == "open":
            return await self._registry.open(first)
        if kind == "resume":
            return await self._registry.resume(first.resume)
        raise invalid(
            "session_not_open", "the first event must be session.update (open) or session.resume"
        )

    async def _pump(
        self, commands: AsyncIterator[spb.ClientCommand], actor: SessionActor, generation: int
    ) -> None:
        try:
            async for cmd in commands:
                await actor.post_command(mail.Command(generation, cmd))
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass
