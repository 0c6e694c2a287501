"""The `nemotron` backend's model: NeMo's DuplexSTTModel (perception and the
NemotronH LLM) loaded once per worker from `duplex_checkpoint`, and what its
text tokens say."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from antiphon.common import moshi_checkpoint
from antiphon.common.nemotron import checkpoint as nemotron_checkpoint
from antiphon.stage0.backends.moshi.model import resolve_dtype
from antiphon.stage0.backends.nemotron.calls import CallReader
from antiphon.stage0.backends.nemotron.prompting import system_prompt
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1.common_pb2 import Tool

if TYPE_CHECKING:
    import torch
    from nemo.collections.speechlm2.models.duplex_stt_model import DuplexSTTModel

log = logging.getLogger(__name__)

# The function channel's call marks in the published tokenizer.
CALL_START, CALL_END = "<SPECIAL_20>", "<SPECIAL_21>"


@dataclass
class NemotronModel:
    stt: DuplexSTTModel
    device: torch.device
    # Tokens that say nothing: padding, and the agent's turn marks (BOS when
    # it takes the turn, EOS when it gives it back).
    silent_ids: frozenset[int]

    @classmethod
    def load(cls, settings: Stage0Settings) -> NemotronModel:
        t0 = time.perf_counter()
        device = moshi_checkpoint.device(settings.duplex_device)
        dtype = resolve_dtype(settings.duplex_dtype, device)
        checkpoint = nemotron_checkpoint.resolve(settings.duplex_checkpoint)
        stt = checkpoint.stt(device).to(dtype)
        silent = frozenset({stt.text_pad_id, stt.text_bos_id, stt.text_eos_id})
        log.info(
            "nemotron model loaded",
            extra={
                "checkpoint": checkpoint.name,
                "device": str(device),
                "dtype": str(dtype).removeprefix("torch."),
                "seconds": round(time.perf_counter() - t0, 1),
            },
        )
        return cls(stt, device, silent)

    def text_of(self, token: int) -> str:
        """What the token says ("" for the silent ones)."""
        if token in self.silent_ids:
            return ""
        return str(self.stt.tokenizer.ids_to_text([token]))

    @property
    def calls_tools(self) -> bool:
        """Its checkpoint has a function head: it calls the session's tools."""
        return hasattr(self.stt, "function_head")

    @property
    def takes_context(self) -> bool:
        """Text goes into the function channel, where a tool's result does."""
        return self.calls_tools

    def prefill(self, instructions: str, voice: str, tools: Sequence[Tool] = ()) -> list[int]:
        """The session's instructions (and tools, for a model that calls
        them) as the prompt its row steps through before the call: `[BOS]
        text [EOS]`, as the published serving wraps a system prompt; none
        without either. (The voice is stage1's.)"""
        text = system_prompt(instructions, tools if self.calls_tools else ())
        if not text.strip():
            return []
        ids = self.stt.tokenizer.text_to_ids(text)
        return [self.stt.text_bos_id, *ids, self.stt.text_eos_id]

    def function_tokens(self, text: str) -> list[int]:
        """Text as the function channel takes it (its call marks, written as
        the tokenizer's special tokens, are those tokens)."""
        return list(self.stt.tokenizer.text_to_ids(text))

    def call_reader(self) -> CallReader:
        tokenizer = self.stt.tokenizer
        return CallReader(
            start=int(tokenizer.token_to_id(CALL_START)),
            end=int(tokenizer.token_to_id(CALL_END)),
            pad=self.stt.text_pad_id,
            decode=lambda ids: str(tokenizer.ids_to_text(ids)),
        )

    def words(self, text: str) -> list[list[int]]:
        return [self.function_tokens(text)]
