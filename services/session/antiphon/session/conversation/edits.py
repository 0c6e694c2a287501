"""Edits to the conversation a client asks for, and its playback reports.

`conversation.item.create` / `retrieve` / `delete` / `truncate`, and
`output_audio.playback_ack`: what the client heard of an answer decides
what the next prompt holds (truncation cuts an assistant item to the words
whose audio was played).
"""

from __future__ import annotations

from antiphon.common.ids import new_id
from antiphon.session.actor.errors import Rejection, unsupported
from antiphon.session.actor.journal import Emitter
from antiphon.session.assistant.response_control import ResponseControl
from antiphon.session.conversation import items
from antiphon.session.conversation.conversation import Conversation, ItemNotFound
from antiphon.session.stage.stage_links import StageLinks
from antiphon.session.user.listening import Listening
from antiphon.session.user.turns import Turns, item_events
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb


class Edits:
    def __init__(
        self,
        *,
        emitter: Emitter,
        links: StageLinks,
        turns: Turns,
        listening: Listening,
        responses: ResponseControl,
        conversation: Conversation,
    ) -> None:
        self._emitter = emitter
        self._links = links
        self._turns = turns
        self._listening = listening
        self._responses = responses
        self._conversation = conversation

    async def item_command(self, cmd: spb.ClientCommand) -> None:
        kind = cmd.WhichOneof("kind")
        try:
            if kind == "create_item":
                await self._create(cmd.create_item)
            elif kind == "retrieve_item":
                item = await self._conversation.get(cmd.retrieve_item.item_id)
                await self._emitter.emit("item_retrieved", spb.ItemRetrieved(item=item))
            elif kind == "delete_item":
                await self._delete(cmd.delete_item.item_id)
            elif kind == "truncate_item":
                await self._truncate(cmd)
        except ItemNotFound as exc:
            param = "previous_item_id" if kind == "create_item" else "item_id"
            raise Rejection.item_not_found(exc, param, cmd.client_type) from exc

    async def _create(self, req: spb.CreateItem) -> None:
        after = req.previous_item_id if req.HasField("previous_item_id") else None
        item = items.created_item(req.item, new_id("item"), new_id("call"))
        audio = items.needs_transcription(req.item)
        if audio:
            # Heard by stage0 like a commit, then stored where it was asked to go.
            rate = next(p.sample_rate_hz for p in req.item.content if p.audio)
            await self._listening.hear_created(item, audio, rate, after)
            return
        await self._conversation.insert(item, after)
        previous = after if after is not None else self._turns.last_item_id
        if after is None:
            self._turns.item_added(item.id)
        await self._emitter.emit_all(
            item_events(previous, item, "item_added", "item_created", "item_done")
        )
        if self._links.capabilities.supports_tool_calls:
            self._into_running_model(item)

    def _into_running_model(self, item: cpb.Item) -> None:
        """A model-native model that calls tools (Nemotron VoiceChat) reads
        what is not the user's speech in its function channel as it runs: a
        function's result, and a system message's text. Others read both
        from the history with their next answer."""
        if item.type == "function_call_output":
            self._links.tool_output(item.call_id, item.output)
        elif item.type == "message" and item.role == "system":
            text = "".join(part.text for part in item.content)
            if text:
                self._links.context(new_id("ctx"), text)

    async def _delete(self, item_id: str) -> None:
        await self._conversation.delete(item_id)
        if item_id == self._turns.last_item_id:
            self._turns.newest_deleted(await self._conversation.last_id())
        await self._emitter.emit("item_deleted", spb.ItemDeleted(item_id=item_id))

    async def _truncate(self, cmd: spb.ClientCommand) -> None:
        req = cmd.truncate_item
        caps = self._links.capabilities
        if not caps.supports_audio_truncate:
            raise unsupported(cmd.client_type, "supports_audio_truncate", caps.implementation_level)
        heard = await self._responses.truncate(req.item_id, req.audio_end_ms)
        await self._emitter.emit(
            "item_truncated",
            spb.ItemTruncated(
                item_id=req.item_id,
                content_index=req.content_index,
                audio_end_ms=req.audio_end_ms,
                transcript=heard,
            ),
        )

    async def playback_ack(self, ack: spb.PlaybackAck) -> None:
        acknowledged = await self._responses.acknowledge(ack)
        await self._emitter.emit("playback_acknowledged", acknowledged)
