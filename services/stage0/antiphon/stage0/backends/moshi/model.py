"""The `moshi` backend's model: Mimi's encoder and the LM's generator, loaded
once per worker from `duplex_checkpoint`, and what its text tokens say.

moshi's own model code does all the work (`LMGen`, `MimiModel`); this module
only chooses the device, dtype and sampling the settings ask for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from antiphon.common import moshi_checkpoint
from antiphon.stage0.backends.moshi.context import words as context_words
from antiphon.stage0.backends.moshi.prompt import (
    Encode,
    ForcedFrame,
    Prompter,
    default_voice_dir,
    prompt_format,
    text_encoder,
)
from antiphon.stage0.settings import KVCacheFormat, Stage0Settings
from antiphon.v1.common_pb2 import Tool

if TYPE_CHECKING:
    import torch
    from moshi.models.compression import MimiModel
    from moshi.models.lm import LMGen, LMModel

log = logging.getLogger(__name__)

# moshi's LMGen defaults, for a checkpoint that ships no `lm_gen_config`.
MOSHI_SAMPLING = {"temp": 0.8, "temp_text": 0.7, "top_k": 250, "top_k_text": 25}


@dataclass(frozen=True)
class Sampling:
    temp: float
    temp_text: float
    top_k: int
    top_k_text: int

    @classmethod
    def of(cls, settings: Stage0Settings, shipped: Mapping[str, Any]) -> Sampling:
        """The settings' values, else the checkpoint's, else moshi's."""
        base = {**MOSHI_SAMPLING, **{k: v for k, v in shipped.items() if k in MOSHI_SAMPLING}}
        s = settings
        return cls(
            temp=float(base["temp"] if s.duplex_temperature is None else s.duplex_temperature),
            temp_text=float(
                base["temp_text"]
                if s.duplex_text_temperature is None
                else s.duplex_text_temperature
            ),
            top_k=int(base["top_k"] if s.duplex_top_k is None else s.duplex_top_k),
            top_k_text=int(
                base["top_k_text"] if s.duplex_text_top_k is None else s.duplex_text_top_k
            ),
        )

    @property
    def greedy(self) -> bool:
        return self.temp == 0 and self.temp_text == 0


@dataclass
class DuplexModel:
    """The generator and codec the lockstep steps, and the text of its tokens."""

    # Text goes into a running row's text stream (context.py); it has no
    # function channel.
    takes_context = True
    calls_tools = False

    lm_gen: LMGen
    mimi: MimiModel
    # A text token's text ("" for padding, whose ids are `silent_ids`).
    text_of: Callable[[int], str]
    silent_ids: frozenset[int]
    # Audio codebooks the model speaks per frame (ModelFrame.codes).
    dep_q: int
    # Text as the model's text tokens (its own tokenizer).
    encode_text: Encode
    # The rows' prompt (PersonaPlex's voice and instructions); None: no prompt.
    prompter: Prompter | None = None

    def words(self, text: str) -> list[list[int]]:
        """A context's text as the tokens forced into a row, word by word."""
        return context_words(self.encode_text, text, self.silent_ids)

    def prefill(
        self, instructions: str, voice: str, tools: Sequence[Tool] = ()
    ) -> list[ForcedFrame]:
        """What a new row steps through, forced, before its call (nothing
        without a prompter). Its prompt has no room for tools: it calls none."""
        if self.prompter is None:
            return []
        return self.prompter.prefill(instructions, voice)

    @classmethod
    def build(
        cls,
        lm: LMModel,
        mimi: MimiModel,
        sampling: Sampling,
        piece: Callable[[int], str] | None = None,
        *,
        encode_text: Encode | None = None,
        context: int | None = None,
        prompter: Prompter | None = None,
        kv_cache: KVCacheFormat = "model",
    ) -> DuplexModel:
        """A model from loaded parts; `piece` and `encode_text`: the tokenizer's
        id -> piece and text -> ids (None: random weights, whose ids are spelled
        out and whose text is a token a character); `kv_cache`: the temporal
        transformer's KV cache format (kv_cache.py)."""
        from moshi.models.lm import LMGen
        from moshi.modules.transformer import set_attention_context

        from antiphon.stage0.backends.moshi.kv_cache import install

        if context is not None:
            # Before streaming starts: the KV cache is sized from it.
            set_attention_context(lm.transformer, context)
        # Before streaming starts too: the cache is made when it does. The
        # depformer keeps moshi's (a few positions a row).
        install(lm.transformer, kv_cache)
        lm_gen = LMGen(
            lm,
            # moshi samples only where use_sampling and the temperature > 0.
            use_sampling=not sampling.greedy,
            temp=sampling.temp,
            temp_text=sampling.temp_text,
            top_k=sampling.top_k,
            top_k_text=sampling.top_k_text,
            # Rows open at different steps: each keeps its own offset.
            support_out_of_sync=True,
        )
        silent = frozenset({lm.text_padding_token_id, lm.end_of_text_padding_id})

        def text_of(token: int) -> str:
            if token in silent:
                return ""
            if piece is None:
                return f" w{token}"
            return piece(token).replace("\u2581", " ")

        encode = encode_text or text_encoder(None, int(lm.text_card))
        return cls(lm_gen, mimi, text_of, silent, lm.dep_q, encode, prompter)

    @classmethod
    def load(cls, settings: Stage0Settings) -> DuplexModel:
        """The worker's model, as `duplex_*` settings say; SystemExit naming the
        setting when none is set."""
        if not settings.duplex_checkpoint:
            raise SystemExit(
                "the moshi backend needs a model: set duplex_checkpoint "
                "(ANTIPHON_STAGE0_DUPLEX_CHECKPOINT) to a local Moshi or PersonaPlex "
                "checkpoint folder, or random:7b / random:tiny"
            )
        if not settings.duplex_compile:
            moshi_checkpoint.disable_compile_by_default()
        import torch

        # Loading runs where it is called; the steps' thread sets its own count.
        torch.set_num_threads(settings.duplex_threads)
        if settings.duplex_seed is not None:
            torch.manual_seed(settings.duplex_seed)
        device = moshi_checkpoint.device(settings.duplex_device)
        dtype = resolve_dtype(settings.duplex_dtype, device)
        t0 = time.perf_counter()
        checkpoint = moshi_checkpoint.resolve(settings.duplex_checkpoint)
        lm = checkpoint.lm(device, dtype)
        mimi = checkpoint.mimi(device)
        tokenizer = checkpoint.text_tokenizer()
        sampling = Sampling.of(settings, checkpoint.lm_gen_config)
        prompting = prompt_format(settings.duplex_prompt_format, checkpoint)
        prompter: Prompter | None = None
        voices: list[str] = []
        if prompting == "personaplex":
            voice_dir = settings.duplex_voice_dir or default_voice_dir(checkpoint)
            prompter = Prompter.of_checkpoint(checkpoint, lm, device, voice_dir)
            voices = prompter.preload()
        model = cls.build(
            lm,
            mimi,
            sampling,
            tokenizer.id_to_piece if tokenizer is not None else None,
            encode_text=text_encoder(tokenizer, int(lm.text_card)),
            context=settings.duplex_context,
            prompter=prompter,
            kv_cache=settings.duplex_kv_cache,
        )
        log.info(
            "duplex model loaded",
            extra={
                "checkpoint": settings.duplex_checkpoint,
                "device": str(device),
                "dtype": str(dtype).removeprefix("torch."),
                "context": settings.duplex_context,
                "kv_cache": settings.duplex_kv_cache,
                "sampling": sampling.__dict__,
                "prompt_format": prompting,
                "voices": voices,
                "load_s": round(time.perf_counter() - t0, 2),
            },
        )
        return model


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    import torch

    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype)
    return dtype
