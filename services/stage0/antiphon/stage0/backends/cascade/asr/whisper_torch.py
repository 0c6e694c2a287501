"""Whisper in torch: many sessions' utterances in one batch, on the GPU.

CTranslate2's Whisper (asr.py) runs on the CPU here (its CUDA build needs
CUDA 12's cuBLAS), one utterance a call. This is the same model run the way
a GPU wants it: the utterances of a batch padded to the longest, their
log-mel features computed on the device, the encoder over the batch's audio
plus the silence Whisper needs after it (not a 30 s window), and a greedy
decode of every row at once with a KV cache (in fixed buffers, so that
whisper_graphs.py can replay a step as a CUDA graph).

The weights are CTranslate2's own `model.bin` as they are (whisper_weights.py:
the shipped Whisper base, or any Whisper a user converted for faster-whisper,
large-v3-turbo the usual choice on a GPU), which is what this module
computes with.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from antiphon.common.audio import pcm16_to_float32
from antiphon.stage0.backends.cascade.asr.asr_text import (
    MAX_FRAMES,
    PAD_S,
    SAMPLE_RATE,
    heard,
    token_budget,
)
from antiphon.stage0.backends.cascade.asr.whisper_weights import Tokens, Weights, read_ct2

N_FFT = 400
HOP = 160


def mel_filters(n_mels: int, n_fft: int = N_FFT, rate: int = SAMPLE_RATE) -> np.ndarray:
    """Slaney-scale triangular filters, area-normalised: Whisper's filterbank."""
    step = math.log(6.4) / 27.0  # the log part's mels per ln(Hz), above 1 kHz

    def to_mel(hz: np.ndarray) -> np.ndarray:
        log = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / step
        return np.asarray(np.where(hz >= 1000.0, log, hz / (200.0 / 3)))

    def to_hz(mel: np.ndarray) -> np.ndarray:
        log = 1000.0 * np.exp(step * (mel - 15.0))
        return np.asarray(np.where(mel >= 15.0, log, mel * (200.0 / 3)))

    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1)
    edges = to_hz(np.linspace(to_mel(np.array(0.0)), to_mel(np.array(rate / 2)), n_mels + 2))
    rising = (freqs[None, :] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    falling = (edges[2:, None] - freqs[None, :]) / (edges[2:] - edges[1:-1])[:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return np.asarray(weights, dtype=np.float32)


def log_mel(audio: torch.Tensor, filters: torch.Tensor, *, tail: int = HOP) -> torch.Tensor:
    """Log-mel features of equal-length waveforms ([B, samples] -> [B, mels,
    frames]), each row floored 8 decades under its own loudest, as Whisper's are.

    `tail`: samples of silence heard after each waveform (Whisper's ASR hears
    a hop more; Smart Turn's features, turn_torch.py, none)."""
    audio = F.pad(audio, (0, tail))
    window = torch.hann_window(N_FFT, device=audio.device)
    spec = torch.stft(audio, N_FFT, HOP, window=window, center=True, return_complex=True)
    mel = torch.clamp(filters @ spec[..., :-1].abs().square(), min=1e-10).log10()
    floor = mel.amax(dim=(1, 2), keepdim=True) - 8.0
    return (torch.maximum(mel, floor) + 4.0) / 4.0


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    heads: int,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Multi-head attention; `mask` (True: attend) over the keys' positions,
    broadcast from its last dimensions."""
    b, t, width = q.shape

    def split(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(b, x.shape[1], heads, width // heads).transpose(1, 2)

    out = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask)
    return out.transpose(1, 2).reshape(b, t, width)


def _until_end(rows: list[list[int]], end: int) -> list[list[int]]:
    """Each row's tokens before its first end of text (a finished row chose
    only ends after it)."""
    return [row[: row.index(end)] if end in row else row for row in rows]


def _layers(names: Mapping[str, Any], side: str) -> int:
    return len({m.group(1) for k in names if (m := re.match(side + r"/layer_(\d+)/", k))})


@dataclass
class Decoded:
    """One row's greedy decode."""

    tokens: list[int]
    avg_logprob: float
    no_speech_prob: float


@dataclass
class DecodeBuffers:
    """Everything a decode step reads and writes, in place: every step of a
    decode uses the same tensors, so one recorded step (a CUDA graph,
    whisper_graphs.py) replays any of them."""

    tokens: torch.Tensor  # [rows, 1]: each row's last token
    position: torch.Tensor  # [1]: the text position `tokens` take
    step: torch.Tensor  # [1]: the step `tokens` came from
    self_k: list[torch.Tensor]  # per layer [rows, length, width]
    self_v: list[torch.Tensor]
    cross_k: list[torch.Tensor]  # per layer [rows, frames, width]
    cross_v: list[torch.Tensor]
    cross_mask: torch.Tensor  # [frames]: the batch's audio (a graph's buffers are longer)
    budget: torch.Tensor  # [rows]: steps each row may take
    done: torch.Tensor  # [rows]
    logprob: torch.Tensor  # [rows], float32
    chosen: torch.Tensor  # [rows, length]: each step's token
    graphed: bool = False  # a DecodeGraphs bucket's: its steps go through `replay`

    @property
    def rows(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def length(self) -> int:
        return int(self.chosen.shape[1])

    def first_rows(self, rows: int, *, graphed: bool = False) -> DecodeBuffers:
        """The first `rows` rows: views of the same memory."""
        return DecodeBuffers(
            tokens=self.tokens[:rows],
            position=self.position,
            step=self.step,
            self_k=[t[:rows] for t in self.self_k],
            self_v=[t[:rows] for t in self.self_v],
            cross_k=[t[:rows] for t in self.cross_k],
            cross_v=[t[:rows] for t in self.cross_v],
            cross_mask=self.cross_mask,
            budget=self.budget[:rows],
            done=self.done[:rows],
            logprob=self.logprob[:rows],
            chosen=self.chosen[:rows],
            graphed=graphed,
        )


class StepGraphs(Protocol):
    """Recorded decode steps (whisper_graphs.DecodeGraphs)."""

    def buffers(self, rows: int, frames: int) -> DecodeBuffers | None:
        """Buffers for a batch of `rows` rows and `frames` audio frames, or
        None where none was recorded that holds it."""

    def replay(self, rows: int) -> None:
        """One step over the buffers `buffers` gave for `rows`."""


class TorchWhisper:
    """One Whisper on one device; `transcribe` hears a batch of utterances at once."""

    def __init__(
        self, weights: Weights, tokens: Tokens, *, device: str = "cpu", half: bool | None = None
    ) -> None:
        self.device = torch.device(device)
        # float16 on a GPU; on a CPU float32 (its half-precision matmuls are slow).
        half = self.device.type == "cuda" if half is None else half
        self.dtype = torch.float16 if half else torch.float32
        self._w = {
            # A copy: CTranslate2's arrays are views of the read-only file bytes.
            k: (torch.from_numpy(v.copy()) if isinstance(v, np.ndarray) else v).to(
                self.device, self.dtype
            )
            for k, v in weights.items()
            if v.ndim
        }
        self._heads = {
            side: int(weights[f"{side}/num_heads"].item()) for side in ("encoder", "decoder")
        }
        self._layers = {side: _layers(weights, side) for side in ("encoder", "decoder")}
        n_mels = self._w["encoder/conv1/weight"].shape[1]
        self._filters = torch.from_numpy(mel_filters(n_mels)).to(self.device)
        self.tokens = tokens
        self._suppress = torch.tensor(tokens.suppress, dtype=torch.long, device=self.device)
        # A look at whether every row is done waits for the device (none on a CPU).
        self._look_every = 4 if self.device.type == "cuda" else 1
        # Set by whisper_graphs.DecodeGraphs: its steps replay, not run op by op.
        self.graphs: StepGraphs | None = None

    @classmethod
    def load(cls, model_dir: Path, *, device: str = "cpu") -> TorchWhisper:
        """A faster-whisper (CTranslate2) model folder's Whisper, on `device`."""
        return cls(read_ct2(model_dir / "model.bin"), Tokens.load(model_dir), device=device)

    # ---------------------------------------------------------------- whole
    @torch.inference_mode()
    def transcribe(self, clips: list[bytes]) -> list[str]:
        """PCM16 mono 16 kHz utterances in, each one's stripped text out ("" for
        no audio or no speech), as `WhisperAsr.transcribe` gives them."""
        audio = [pcm16_to_float32(c[: len(c) // 2 * 2]) for c in clips]
        if not any(len(a) for a in audio):
            return ["" for _ in clips]
        seconds = [min(len(a) / SAMPLE_RATE, 30.0) for a in audio]
        rows = self.decode(
            self.encode(self.features(audio)),
            [token_budget(s) for s in seconds],
        )
        return [
            heard(str(self.tokens.decode(r.tokens)), r.avg_logprob, r.no_speech_prob)
            if len(a)
            else ""
            for r, a in zip(rows, audio, strict=True)
        ]

    def features(self, clips: list[np.ndarray]) -> torch.Tensor:
        """One batch's features: each clip with Whisper's silence after it, the
        shorter ones with more, up to the longest (at most 30 s)."""
        longest = min(max(len(c) for c in clips) + int(PAD_S * SAMPLE_RATE), MAX_FRAMES * HOP)
        batch = np.zeros((len(clips), longest), np.float32)
        for r, clip in enumerate(clips):
            batch[r, : min(len(clip), longest)] = clip[:longest]
        features = log_mel(torch.from_numpy(batch).to(self.device), self._filters)
        return features[:, :, :MAX_FRAMES]

    # -------------------------------------------------------------- encoder
    def encode(self, features: torch.Tensor) -> torch.Tensor:
        w = self._w
        x = features.to(self.dtype)
        x = F.gelu(F.conv1d(x, w["encoder/conv1/weight"], w["encoder/conv1/bias"], padding=1))
        x = F.gelu(
            F.conv1d(x, w["encoder/conv2/weight"], w["encoder/conv2/bias"], stride=2, padding=1)
        ).transpose(1, 2)
        x = x + w["encoder/position_encodings/encodings"][: x.shape[1]]
        heads = self._heads["encoder"]
        for i in range(self._layers["encoder"]):
            p = f"encoder/layer_{i}"
            h = self._norm(x, f"{p}/self_attention/layer_norm")
            q, k, v = self._linear(h, f"{p}/self_attention/linear_0").chunk(3, dim=-1)
            x = x + self._linear(_attend(q, k, v, heads), f"{p}/self_attention/linear_1")
            x = x + self._ffn(x, f"{p}/ffn")
        return self._norm(x, "encoder/layer_norm")

    # -------------------------------------------------------------- decoder
    def decode(self, audio: torch.Tensor, max_tokens: list[int]) -> list[Decoded]:
        """Greedy, every row at once, each up to its own token budget."""
        tok = self.tokens
        rows, frames = audio.shape[:2]
        steps = max(max_tokens)
        graphs = self.graphs
        b = graphs.buffers(rows, frames) if graphs is not None else None
        if b is None:
            b = self.decode_buffers(rows, len(tok.prompt) + steps, frames)
        self._begin(b, audio, max_tokens)
        prompt = torch.tensor([tok.prompt] * b.rows, device=self.device)
        x = self._forward(b, prompt, torch.arange(len(tok.prompt), device=self.device))
        no_speech = [0.0] * rows
        if tok.no_speech is not None:
            # What the model makes of the audio before any text: silence or speech.
            first = (x[:rows, 0] @ self._w["decoder/embeddings/weight"].T).float().softmax(-1)
            no_speech = first[:, tok.no_speech].tolist()
        self._choose(b, x[:, -1], first=True)
        b.position.fill_(len(tok.prompt))
        b.step.fill_(1)
        taken = 1
        while taken < steps:
            # Each look at `done` waits for the device; on a GPU a few steps
            # are queued between looks (a finished row only adds ends).
            if taken % self._look_every == 0 and bool(b.done[:rows].all()):
                break
            if graphs is not None and b.graphed:
                graphs.replay(b.rows)
            else:
                self.decode_step(b)
            taken += 1
        return [
            # Per text token, the end's log-prob included (CTranslate2's score).
            Decoded(o, lp / max(1, len(o)), ns)
            for o, lp, ns in zip(
                _until_end(b.chosen[:rows, :taken].tolist(), tok.end),
                b.logprob[:rows].tolist(),
                no_speech,
                strict=True,
            )
        ]

    def decode_buffers(self, rows: int, length: int, frames: int) -> DecodeBuffers:
        """Zeroed buffers for a decode of `rows` rows, `length` text positions
        and `frames` encoded audio frames."""
        layers, width = self._layers["decoder"], self._w["decoder/embeddings/weight"].shape[1]

        def zeros(*shape: int, dtype: torch.dtype = self.dtype) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=self.device)

        return DecodeBuffers(
            tokens=zeros(rows, 1, dtype=torch.long),
            position=zeros(1, dtype=torch.long),
            step=zeros(1, dtype=torch.long),
            self_k=[zeros(rows, length, width) for _ in range(layers)],
            self_v=[zeros(rows, length, width) for _ in range(layers)],
            cross_k=[zeros(rows, frames, width) for _ in range(layers)],
            cross_v=[zeros(rows, frames, width) for _ in range(layers)],
            cross_mask=zeros(frames, dtype=torch.bool),
            budget=zeros(rows, dtype=torch.long),
            done=zeros(rows, dtype=torch.bool),
            logprob=zeros(rows, dtype=torch.float32),
            chosen=zeros(rows, length, dtype=torch.long),
        )

    def decode_step(self, b: DecodeBuffers) -> None:
        """One greedy step of every row, in place: what a CUDA graph records."""
        x = self._forward(b, b.tokens, b.position)
        self._choose(b, x[:, -1], first=False)
        b.position += 1
        b.step += 1

    def _begin(self, b: DecodeBuffers, audio: torch.Tensor, max_tokens: list[int]) -> None:
        rows, frames = audio.shape[:2]
        for i in range(self._layers["decoder"]):
            # Cross-attention's keys and values: once per batch, not per step.
            k, v = self._linear(audio, f"decoder/layer_{i}/attention/linear_1").chunk(2, dim=-1)
            b.cross_k[i][:rows, :frames] = k
            b.cross_v[i][:rows, :frames] = v
        b.cross_mask.fill_(False)
        b.cross_mask[:frames] = True
        b.budget.zero_()  # rows past `rows` (a graph's padding) end at once
        b.budget[:rows] = torch.tensor(max_tokens, device=self.device)
        b.done.fill_(False)
        b.logprob.zero_()
        b.step.zero_()  # the prompt's step; a graph's buffers hold the last decode's

    def _forward(self, b: DecodeBuffers, tokens: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        """The decoder over `tokens` ([rows, n]) at text positions `at` ([n]),
        their keys and values kept in `b`."""
        w, heads = self._w, self._heads["decoder"]
        x = w["decoder/embeddings/weight"][tokens]
        x = x + w["decoder/position_encodings/encodings"].index_select(0, at)
        # Each token sees the positions up to its own.
        seen = torch.arange(b.length, device=self.device)[None, :] <= at[:, None]
        for i in range(self._layers["decoder"]):
            p = f"decoder/layer_{i}"
            h = self._norm(x, f"{p}/self_attention/layer_norm")
            q, k, v = self._linear(h, f"{p}/self_attention/linear_0").chunk(3, dim=-1)
            b.self_k[i].index_copy_(1, at, k)
            b.self_v[i].index_copy_(1, at, v)
            attended = _attend(q, b.self_k[i], b.self_v[i], heads, mask=seen)
            x = x + self._linear(attended, f"{p}/self_attention/linear_1")
            q = self._linear(self._norm(x, f"{p}/attention/layer_norm"), f"{p}/attention/linear_0")
            attended = _attend(q, b.cross_k[i], b.cross_v[i], heads, mask=b.cross_mask[None, :])
            x = x + self._linear(attended, f"{p}/attention/linear_2")
            x = x + self._ffn(x, f"{p}/ffn")
        return self._norm(x, "decoder/layer_norm")

    def _choose(self, b: DecodeBuffers, last: torch.Tensor, *, first: bool) -> None:
        tok = self.tokens
        logits = (last @ self._w["decoder/embeddings/weight"].T).float()
        if self._suppress.numel():
            # index_fill_, not an assignment: its value is no host tensor to copy.
            logits.index_fill_(1, self._suppress, -math.inf)
        if first:  # no text starts blank, or ends before it starts
            logits[:, [tok.blank, tok.end]] = -math.inf
        logp = logits.log_softmax(-1)
        chosen = logp.argmax(-1).masked_fill(b.done | (b.step >= b.budget), tok.end)
        b.logprob += logp.gather(1, chosen[:, None])[:, 0].masked_fill(b.done, 0.0)
        b.chosen.index_copy_(1, b.step, chosen[:, None])
        b.done |= chosen == tok.end
        b.tokens.copy_(chosen[:, None])

    # --------------------------------------------------------------- pieces
    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self._w[f"{name}/weight"], self._w.get(f"{name}/bias"))

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self._w[f"{name}/gamma"], self._w[f"{name}/beta"])

    def _ffn(self, x: torch.Tensor, name: str) -> torch.Tensor:
        h = self._linear(self._norm(x, f"{name}/layer_norm"), f"{name}/linear_0")
        return self._linear(F.gelu(h), f"{name}/linear_1")
