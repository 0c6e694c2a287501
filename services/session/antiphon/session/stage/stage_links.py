"""A session's links to its two stage workers: every request goes out here.

The links own the epoch fence (each request is stamped with the current
epoch, in this one place), which worker holds each stage, and fail-over:
a binding lost or given back is replaced by one to another worker, opened
as a fresh session there. A stage with no worker to take it stays unbound
until a later tick finds one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from antiphon.common import stage_audio
from antiphon.session.stage.stages import Binding, Released
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2

STAGES = ("stage0", "stage1")
# (stage, address that failed or "") -> a binding to another worker of that
# stage (any, for ""), with what the worker says of itself; raises BindError.
Rebind = Callable[[str, str], Awaitable[tuple[Binding[Any], stage_pb2.StageInfo]]]


def capabilities(info0: stage_pb2.StageInfo, info1: stage_pb2.StageInfo) -> cpb.Capabilities:
    """What the session can do, given what its two workers can."""
    caps = cpb.Capabilities()
    caps.CopyFrom(info0.capabilities)
    # Truncation by playback position needs the voice's word timings.
    caps.supports_audio_truncate = info1.capabilities.supports_audio_truncate
    # The session service itself provides resume and replay.
    caps.supports_session_resume = True
    return caps


class StageLinks:
    def __init__(
        self,
        *,
        stage0: Binding[stage_pb2.Stage0Request],
        stage1: Binding[stage_pb2.Stage1Request],
        info: tuple[stage_pb2.StageInfo, stage_pb2.StageInfo],
        epoch: int,
        rebind: Rebind,
        stage0_open: Callable[[], stage_pb2.Stage0Open],
        stage1_open: Callable[[], stage_pb2.Stage1Open],
    ) -> None:
        self._bindings: dict[str, Binding[Any]] = {"stage0": stage0, "stage1": stage1}
        self._info = {"stage0": info[0], "stage1": info[1]}
        self._epoch = epoch
        self._rebind = rebind
        self._stage0_open = stage0_open
        self._stage1_open = stage1_open
        # Stages whose worker died with no replacement yet: stage -> its address.
        self._unbound: dict[str, str] = {}
        self._rebinds = 0

    # ------------------------------------------------------------ state
    @property
    def epoch(self) -> int:
        """The fence: requests carry it, and results of an earlier one are stale."""
        return self._epoch

    @property
    def capabilities(self) -> cpb.Capabilities:
        """Of the workers bound now (or last bound, while given back)."""
        return capabilities(self._info["stage0"], self._info["stage1"])

    @property
    def input_rate(self) -> int:
        """The rate stage0's backend hears: every input is resampled to it."""
        return self._info["stage0"].capabilities.input_sample_rate_hz or stage_audio.RATE

    @property
    def model_native(self) -> bool:
        """Stage0's model decides itself when to talk (it streams `ModelFrame`s)."""
        return self._info["stage0"].capabilities.model_native

    @property
    def rebinds(self) -> int:
        """How often a stage's binding was let go or replaced: work asked of
        the workers before a change is not coming back."""
        return self._rebinds

    @property
    def unbound(self) -> dict[str, str]:
        """Stages whose worker died with none to replace it yet: stage -> the
        address that failed (a copy: `replace` and `forget_unbound` change it)."""
        return dict(self._unbound)

    def addresses(self) -> dict[str, str]:
        """Where each stage's work runs, for operators ("" while given back)."""
        return {stage: self._bindings[stage].address for stage in STAGES}

    def is_current(self, stage: str, binding: Binding[Any]) -> bool:
        return self._bindings[stage] is binding

    # ---------------------------------------------------------- stage0
    def audio(
        self, pcm16: bytes, video_frames: Sequence[bytes] = (), max_slice_nums: int = 0
    ) -> None:
        """Input audio for stage0, and the camera frames that rode it."""
        audio = stage_pb2.Stage0Audio(
            epoch=self._epoch,
            pcm16=pcm16,
            video_frames=video_frames,
            max_slice_nums=max_slice_nums,
        )
        self._send0(audio=audio)

    def commit(self, item_id: str) -> None:
        self._send0(commit=stage_pb2.Stage0Commit(epoch=self._epoch, item_id=item_id))

    def clear_input(self) -> None:
        self._send0(clear_input=stage_pb2.Stage0ClearInput(epoch=self._epoch))

    def configure(self) -> None:
        """The lane or turn detection changed: stage0 reconfigures in place."""
        self._send0(configure=self._stage0_open())

    def generate(self, request: stage_pb2.Generate) -> None:
        """Ask for an answer: `request`, stamped with the current epoch."""
        request.epoch = self._epoch
        self._send0(generate=request)

    def context(self, context_id: str, text: str) -> None:
        """Text into the running model's context (model_context.py)."""
        self._send0(context=stage_pb2.Stage0Context(epoch=self._epoch, id=context_id, text=text))

    def tool_output(self, call_id: str, output: str) -> None:
        """A function's result into a model-native model that calls tools
        (`capabilities.supports_tool_calls`): it goes on from there."""
        result = stage_pb2.Stage0ToolOutput(epoch=self._epoch, call_id=call_id, output=output)
        self._send0(tool_output=result)

    def cancel_response(self, response_id: str) -> None:
        """Both stages stop one response's work (a preemptive answer dropped);
        the epoch and all other work stay as they are."""
        cancel = stage_pb2.StageCancelResponse(response_id=response_id)
        self._send0(cancel_response=cancel)
        self._bindings["stage1"].send(stage_pb2.Stage1Request(cancel_response=cancel))

    # ---------------------------------------------------------- stage1
    def synthesize(self, response_id: str, text: str = "", *, final: bool = False) -> None:
        self._bindings["stage1"].send(
            stage_pb2.Stage1Request(
                text=stage_pb2.SynthesizeText(
                    epoch=self._epoch, response_id=response_id, text=text, final=final
                )
            )
        )

    def decode(self, frame: stage_pb2.ModelFrame, response_id: str) -> None:
        """A model-native frame's audio tokens to stage1: every frame, so its
        decoder runs on; only a response's frames come back as audio."""
        self._bindings["stage1"].send(
            stage_pb2.Stage1Request(
                frame=stage_pb2.DecodeFrame(
                    epoch=self._epoch,
                    response_id=response_id,
                    codes=frame.codes,
                    tokens=frame.tokens,
                    text=frame.text if response_id else "",
                    index=frame.index,
                )
            )
        )

    # ----------------------------------------------------------- fence
    def advance_epoch(self) -> None:
        """Both stages stop and drop all work of earlier epochs."""
        self._epoch += 1
        self._send0(cancel=stage_pb2.Stage0Cancel(epoch=self._epoch))
        self._bindings["stage1"].send(
            stage_pb2.Stage1Request(cancel=stage_pb2.Stage1Cancel(epoch=self._epoch))
        )

    # --------------------------------------------------------- binding
    def open(self, only: str = "") -> None:
        """Open this session on its workers (again, after a takeover or on a
        replacement worker)."""
        if only != "stage1":
            self._send0(open=self._stage0_open())
        if only != "stage0":
            self._bindings["stage1"].send(stage_pb2.Stage1Request(open=self._stage1_open()))

    def held(self, stage: str) -> bool:
        return not isinstance(self._bindings[stage], Released)

    async def release(self, stage: str) -> bool:
        """Give the stage's worker slot back; False when none was held."""
        if not self.held(stage):
            return False
        binding = self._bindings[stage]
        self._bindings[stage] = Released()
        self._rebinds += 1
        await binding.close()
        return True

    async def bind_released(self) -> None:
        """Bind again the stages given back, each opened fresh on its worker.
        On a refusal nothing stays bound (raises BindError)."""
        fresh: list[str] = []
        try:
            for stage in STAGES:
                if not self.held(stage):
                    self._bindings[stage], self._info[stage] = await self._rebind(stage, "")
                    fresh.append(stage)
        except BaseException:
            for stage in fresh:
                await self.release(stage)
            raise
        for stage in fresh:
            self.open(stage)

    async def replace(self, stage: str, failed: str) -> None:
        """Bind `stage` to another worker than `failed`, and open it there.
        Raises what the rebind raised; the stage is unbound until it succeeds."""
        self._rebinds += 1
        try:
            self._bindings[stage], self._info[stage] = await self._rebind(stage, failed)
        except Exception:
            self._unbound[stage] = failed
            raise
        self._unbound.pop(stage, None)
        self.open(stage)

    def forget_unbound(self) -> None:
        """Detached: no stage is sought a worker until a resume binds them again."""
        self._unbound.clear()

    async def close(self) -> None:
        for stage in STAGES:
            await self._bindings[stage].close()

    def close_soon(self) -> None:
        """Close both streams without waiting (standing down inside a handler)."""
        for binding in self._bindings.values():
            task = asyncio.ensure_future(binding.close())
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    def _send0(self, **request: Any) -> None:
        self._bindings["stage0"].send(stage_pb2.Stage0Request(**request))
