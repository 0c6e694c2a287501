"""EAR-TTS over a batch of rows: one frame of audio codes a step from each
row's text token, each row a session of its own.

Per row it keeps what NeMo's loop carries from one frame to the next
(NemotronVoiceChat.offline_inference, DuplexEARTTS.infer_codes_one_step):
the previous frame's codes and text token, and its history in the backbone's
cache (kv_columns.py, whose columns and masks keep the rows apart). A
session's first frame is not spoken, as in NeMo, where the TTS steps from
the second frame on and the first frame's codes stay zero; the second steps
from the prompt's last code and token.

Generation is the checkpoint's (its noise scale and top-p or top-k), without
classifier-free guidance: NeMo's guidance doubles the batch inside the
model's forward, where these rows' masks cannot follow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from antiphon.stage1.backends.nemotron.kv_columns import KvColumns
from antiphon.stage1.backends.nemotron.prompt import Prompt

if TYPE_CHECKING:
    import torch
    from nemo.collections.speechlm2.models.duplex_ear_tts import DuplexEARTTS


class TtsRows:
    def __init__(self, tts: DuplexEARTTS, prompt: Prompt, rows: int) -> None:
        import torch

        self._tts = tts
        self._model = tts.tts_model
        backbone = self._model.backbone.config
        layer_types = list(getattr(backbone, "layer_types", None) or ["full_attention"])
        implementation = getattr(backbone, "_attn_implementation", "sdpa")
        self.codebooks = int(self._model.config.num_quantizers)
        self._prompt = prompt
        self._cache = KvColumns(
            prompt.keys,
            prompt.values,
            rows,
            sliding_window=getattr(backbone, "sliding_window", None),
            all_sliding=all(kind == "sliding_attention" for kind in layer_types),
            additive_masks=implementation != "sdpa",
        )
        device = prompt.code.device
        self._prev_token = torch.full((rows, 1), prompt.token, dtype=torch.long, device=device)
        self._prev_code = prompt.code.expand(rows, 1, self.codebooks).clone()
        # Rows past their session's first frame (NeMo's frame 0: no step).
        self._started = torch.zeros(rows, dtype=torch.bool, device=device)
        self._generation = tts._get_generation_config(guidance_enabled=False)
        self._silence = tts.codec_silence_tokens.view(1, 1, -1)
        self._silence_on_eos = bool(tts.cfg.get("inference_force_speech_silence_on_eos", True))
        self._uses_context = tts.cfg.tts_config.context_hidden_size is not None
        self._pad = int(tts.text_pad_id)
        self._eos = int(tts.text_eos_id)

    @property
    def columns(self) -> int:
        """The backbone cache's length, in steps (the prompt's included)."""
        return self._cache.length

    def reset(self, rows: torch.Tensor) -> None:
        """Rows (a bool mask) start afresh: a new session's prompt state."""
        if not bool(rows.any()):
            return
        self._cache.reset(rows)
        self._prev_token[rows] = self._prompt.token
        self._prev_code[rows] = self._prompt.code[0]
        self._started[rows] = False

    def step(self, tokens: torch.Tensor, stepping: torch.Tensor) -> torch.Tensor:
        """One frame of codes ([rows, codebooks]) for the rows in `stepping`
        (a bool mask), from their frames' text tokens ([rows]); the other rows
        sit the step out, unchanged, their codes zero. Call in inference mode."""
        import torch

        codes = torch.zeros(tokens.shape[0], self.codebooks, dtype=torch.long, device=tokens.device)
        speaking = stepping & self._started
        self._started |= stepping
        if not bool(speaking.any()):
            return codes
        current = torch.where(speaking, tokens, self._pad)[:, None]
        previous = self._prev_code
        if self._silence_on_eos:
            # NeMo's `inference_force_speech_silence_on_eos`: after an EOS, silence.
            eos = (current == self._eos)[:, :, None]
            previous = torch.where(eos, self._silence.expand_as(previous), previous)
        positions, masks = self._cache.begin(speaking)
        out = self._model(
            code=previous,
            context_hidden_state=self._context(),
            subword_ids=current,
            subword_mask=torch.ones_like(current, dtype=torch.bool),
            attention_mask=masks,
            position_ids=positions,
            past_key_values=self._cache,
            use_cache=True,
            guidance_enabled=False,
            generation_config=self._generation,
            ignore_eos_flag_stop=True,
        )
        self._cache.end()
        made: torch.Tensor = out["codes"]  # [rows, 1, codebooks]
        codes[speaking] = made[speaking, 0]
        self._prev_code[speaking] = made[speaking]
        self._prev_token[speaking] = current[speaking]
        return codes

    def _context(self) -> Any:
        """The LLM's embedding of each row's previous token, for a TTS that reads it."""
        return self._tts.embed_tokens(self._prev_token) if self._uses_context else None
