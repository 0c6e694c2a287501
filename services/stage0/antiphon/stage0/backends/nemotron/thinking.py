"""The `nemotron` backend's LLM: NeMo's DuplexSTTModel's NemotronH stepped one
80 ms frame at a time for a batch of rows, as NeMo's own inference steps one
session (streaming/duplex_stt_inference.py), with a cache.

Each step a row's input is its frame of heard audio (hearing.py) plus the
embedding of the text token it said the step before (padding at its first
step, NeMo's "BOS" of the text channel), each scaled by the model's channel
weights; the LLM's text head answers greedily. NeMo's reference recomputes
the whole history every step for NemotronH (it has no cache path for the
hybrid); a `DynamicCache` built from the LLM's config gives the same tokens
(tests/stage0/test_nemotron_thinking.py) at one frame's cost.

A row may start with a prompt (the session's instructions as `[BOS] text
[EOS]` tokens: NeMo's `prompt_tokens`): each token's embedding stands where
the audio would, the other channels hold padding. It goes in at once, in one
forward of that row alone, whose states are then written into the batch's:
its Mamba states into its row, its attention keys as new columns that only
it sees (every row's cache grows by the prompt's length; the window counts
them). A prompt a token a step would leave the row deaf for seconds.

A checkpoint with a function head (tools) has a third channel: each step
the head's greedy token is the row's function channel, fed back (embedded
with the text table, scaled by its weight) the next step. What goes in may
instead be forced, a token a step: a function's result (prompting.py); the
text channel then holds padding. `called` is what the head itself said, the
channel calls are read from (calls.py).

A checkpoint that sets `force_turn_taking` has each row's text token
corrected from its transcript of the user before it goes back in, as NeMo
does (turn_taking.py).

Rows start afresh alone: a Mamba2 layer's state is per row and fixed-size
(zeroed), and an attention layer's keys stay in the cache but are masked
out for a reset row through the 2D attention mask (NemotronH's attention has
no rotary positions, so a row's positions need no renumbering). The
attention cache keeps at most `window` frames; older ones are dropped for
every row at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from antiphon.stage0.backends.nemotron.turn_taking import TurnTaking

if TYPE_CHECKING:
    from nemo.collections.speechlm2.models.duplex_stt_model import DuplexSTTModel


class Thinking:
    def __init__(self, stt: DuplexSTTModel, rows: int, *, window: int) -> None:

        self.stt = stt
        self.rows = rows
        self.window = window
        cfg = stt.cfg
        self._w_user = float(cfg.get("duplex_user_channel_weight", 1.0))
        self._w_text = float(cfg.get("duplex_text_channel_weight", 1.0))
        self._w_asr = float(cfg.get("duplex_asr_text_weight", 1.0))
        self._boosts = {
            stt.text_pad_id: cfg.get("inference_pad_boost"),
            stt.text_bos_id: cfg.get("inference_bos_boost"),
            stt.text_eos_id: cfg.get("inference_eos_boost"),
        }
        self._user_text = bool(stt.predict_user_text)
        self._function: torch.nn.Module | None = getattr(stt, "function_head", None)
        self._w_function = float(cfg.get("duplex_function_channel_weight", 1.0))
        weight = next(stt.llm.parameters())
        device = weight.device
        self._cache = DynamicCache(config=stt.llm.config)
        # Per row, per cached position: 1 where the row's current session
        # wrote it. A reset row's older positions turn 0.
        self._valid = torch.zeros(rows, 0, dtype=torch.long, device=device)
        pad = torch.full((rows,), stt.text_pad_id, dtype=torch.long, device=device)
        # The tokens each row said last step (its text channel, and its
        # transcript of the user where the model predicts one).
        self._said = pad.clone()
        self._heard = pad.clone()
        # The function channel as fed back, and as the head said it last step.
        self._function_in = pad.clone()
        self.called = pad.clone()
        self._turns = TurnTaking(stt, rows, device)
        # One step of every row, then all afresh: the cache's layers exist
        # (a prompt's states are written into them), its column masked.
        self.step(torch.zeros(rows, stt.llm.config.hidden_size, dtype=weight.dtype, device=device))
        self.reset(torch.ones(rows, dtype=torch.bool, device=device))

    def reset(self, mask: torch.Tensor) -> None:
        """Rows `mask` [rows] start a new session at their next step."""
        if not bool(mask.any()):
            return
        for layer in self._cache.layers:
            for states in (
                getattr(layer, "conv_states", None),
                getattr(layer, "recurrent_states", None),
            ):
                for state in (states or {}).values():
                    if state is not None:
                        state[mask] = 0
        self._valid[mask] = 0
        for channel in (self._said, self._heard, self._function_in, self.called):
            channel[mask] = self.stt.text_pad_id
        self._turns.reset(mask)

    def prefill(self, row: int, prompt: list[int]) -> None:
        """Row `row`, just reset, takes in `prompt` before its first step."""
        stt = self.stt
        device = self._valid.device
        tokens = torch.tensor([prompt], dtype=torch.long, device=device)
        pad = torch.full_like(tokens, stt.text_pad_id)
        x = stt.embed_tokens(tokens) * self._w_user + stt.embed_tokens(pad) * self._w_text
        if self._user_text:
            x = x + stt.embed_asr_tokens(pad) * self._w_asr
        if self._function is not None:
            x = x + stt.embed_tokens(pad) * self._w_function
        alone = DynamicCache(config=stt.llm.config)
        stt.llm(inputs_embeds=x, past_key_values=alone, use_cache=True)
        span = len(prompt)
        for batch_layer, row_layer in zip(self._cache.layers, alone.layers, strict=True):
            if isinstance(batch_layer, DynamicLayer) and isinstance(row_layer, DynamicLayer):
                ours_k, ours_v = batch_layer.keys, batch_layer.values
                its_k, its_v = row_layer.keys, row_layer.values
                if ours_k is None or ours_v is None or its_k is None or its_v is None:
                    continue
                batch_layer.keys = _with_columns(ours_k, row, its_k)
                batch_layer.values = _with_columns(ours_v, row, its_v)
                continue
            for name in ("conv_states", "recurrent_states"):
                ours, its = getattr(batch_layer, name, None), getattr(row_layer, name, None)
                for key, state in (ours or {}).items():
                    if state is not None and its and its.get(key) is not None:
                        state[row] = its[key][0]
        columns = torch.zeros(self.rows, span, dtype=self._valid.dtype, device=device)
        columns[row] = 1
        self._valid = torch.cat([self._valid, columns], dim=1)
        self._turns.prompted(row, span)

    @property
    def calls_tools(self) -> bool:
        return self._function is not None

    def step(self, heard: torch.Tensor, forced: torch.Tensor | None = None) -> torch.Tensor:
        """One frame for every row: `heard` [rows, H] is each row's perception
        embedding for it, `forced` [rows] a function-channel token forced in
        (-1: none); the text token each row says [rows]."""
        stt = self.stt
        x = heard * self._w_user + stt.embed_tokens(self._said) * self._w_text
        if self._user_text:
            x = x + stt.embed_asr_tokens(self._heard) * self._w_asr
        if self._function is not None:
            x = x + stt.embed_tokens(self._function_in) * self._w_function
        self._trim()
        ones = torch.ones(self.rows, 1, dtype=self._valid.dtype, device=self._valid.device)
        self._valid = torch.cat([self._valid, ones], dim=1)
        out = stt.llm(
            inputs_embeds=x.unsqueeze(1),
            past_key_values=self._cache,
            use_cache=True,
            attention_mask=self._valid,
        )
        hidden = out.last_hidden_state[:, -1]
        logits = stt.lm_head(hidden)
        for token, boost in self._boosts.items():
            if boost:
                logits[:, token] += boost
        heard_text = stt.asr_head(hidden).argmax(dim=-1) if self._user_text else self._heard
        said: torch.Tensor = self._turns.correct(logits.argmax(dim=-1), heard_text)
        pad = self.stt.text_pad_id
        called = (
            self._function(hidden).argmax(dim=-1) if self._function is not None else self.called
        )
        function_in = called
        if forced is not None and bool((forced >= 0).any()):
            # A result going in: the channel holds it, the text waits.
            taking = forced >= 0
            function_in = torch.where(taking, forced, called)
            said = torch.where(taking, pad, said)
        self._turns.record(said, heard_text)
        self._said, self._heard = said, heard_text
        self._function_in, self.called = function_in, called
        return said

    def _trim(self) -> None:
        """Keep the attention cache to `window` - 1 positions before a step."""
        over = self._valid.shape[1] - (self.window - 1)
        if over <= 0:
            return
        for layer in self._cache.layers:
            if (
                isinstance(layer, DynamicLayer)
                and layer.keys is not None
                and layer.values is not None
            ):
                layer.keys = layer.keys[:, :, over:]
                layer.values = layer.values[:, :, over:]
        self._valid = self._valid[:, over:]


def _with_columns(cache: torch.Tensor, row: int, prompt: torch.Tensor) -> torch.Tensor:
    """`cache` [rows, heads, columns, dim] with `prompt`'s columns [1, heads,
    span, dim] added at the end: `row`'s, zeros for the others (masked)."""
    added = cache.new_zeros(cache.shape[0], cache.shape[1], prompt.shape[2], cache.shape[3])
    added[row] = prompt[0]
    return torch.cat([cache, added], dim=2)
