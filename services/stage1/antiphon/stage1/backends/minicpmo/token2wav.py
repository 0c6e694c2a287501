"""MiniCPM-o 4.5's token2wav: the talker's S3 speech codes (25 a second,
0..6560) to 24 kHz mono audio, streamed one assistant turn at a time, as
the published duplex loop streams them through `stepaudio2.Token2wav`.

The modules are stepaudio2-minicpmo's own (common/minicpmo/stepaudio.py
imports them without the package's CUDA-only `__init__`); what runs them
here is the package's `Token2wav.stream` on the CPU, in float32, with one
voice per worker:

- At load, the flow's caches are primed with the speaker's prompt: its codes
  plus 3 silence codes (4218) of lookahead, its mel and its embedding
  (`setup_cache`, ten solver steps). Every turn starts from that state.
- A turn starts with those 3 silence codes carried. Each flow call gets the
  carried codes and the new ones; the last 3 are its lookahead, to be spoken
  by the next call, so it keeps them. The final call (`last`) speaks them.
- HiFT re-voices the last 8 mel frames of the call before and cross-fades
  its first 160 ms (3840 samples, a Hamming window) into what the call
  before held back.
- The solver's attention caches are cut back to the prompt plus 100 frames
  after each call, as the package cuts them.

So a turn of N codes makes 960 x (N + 3) samples: 24000 for every 25 codes,
and the 3 silence codes (120 ms) it starts with. A call of n new codes
returns 960 x n samples, but for the first, which holds back 3840 (the
cross-fade), and the last, which returns those, plus 960 x 3 of lookahead
it speaks. A non-final push of fewer than 4 codes before the turn's first
call is held for the next push: the first call must give HiFT its 8 frames.

Speaker conditioning comes precomputed (`speaker.pt`, stepaudio.Speaker);
computing it from a wav needs the S3 tokenizer and campplus ONNX files of
the folder, a Kaldi fbank and resampling (stepaudio.Speaker says which).

Departures from the package: HiFT draws noise from torch's global
generator, so each call runs on a forked generator seeded by the call's
index in its turn (a stream's audio is then its own codes' alone, the same
on every run); the flow's noise is drawn from a fixed seed at load; a push
longer than the caches hold is split into several calls. One voice serves
every stream, one call at a time (the flow writes its caches into shared
scratch); each stream keeps its own copy of them, some 0.6 GB at the
published size.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from antiphon.common.assets import MissingAssetError
from antiphon.common.minicpmo import stepaudio

if TYPE_CHECKING:
    import torch

SILENCE = 4218
# The package's constants: ten solver steps, HiFT's 8 held-back mel frames
# (160 ms), the caches cut back to the prompt plus 100 frames, and scratch
# for 1000 frames of attention cache.
STEPS = 10
HIFT_HELD_FRAMES = 8
CACHE_TAIL_FRAMES = 100
CACHE_FRAMES = 1000


class BadSpeechCode(ValueError):
    """A code outside the flow's vocabulary (the talker's EOS included)."""


class StreamFinished(RuntimeError):
    """A push after the turn's last."""


class Token2Wav:
    """The flow, the vocoder and one speaker's primed caches, shared by every
    stream; one flow call runs at a time."""

    rate: int

    def __init__(self, flow: Any, hift: Any, speaker: stepaudio.Speaker, device: str) -> None:
        import torch

        self._flow = flow
        self._hift = hift
        self._device = torch.device(device)
        self._lock = threading.Lock()
        self.rate = int(hift.sampling_rate)
        self.vocabulary = int(flow.input_embedding.num_embeddings)
        self.lookahead = int(flow.pre_lookahead_len)
        self._prompt_frames = int(speaker.mel.shape[0])
        hop = int(hift.f0_upsamp.scale_factor)
        self.held_samples = HIFT_HELD_FRAMES * hop
        # The first call must leave HiFT its held frames.
        self.min_codes = -(-HIFT_HELD_FRAMES // flow.up_rate)
        # A call adds up to (codes + lookahead) x up-rate frames to caches of
        # at most the prompt and the tail.
        room = CACHE_FRAMES - self._prompt_frames - CACHE_TAIL_FRAMES
        self.max_codes = room // flow.up_rate - self.lookahead
        if self.max_codes < self.min_codes:
            raise ValueError(f"a speaker prompt of {self._prompt_frames} frames is too long")
        # float64, as the package's: its cross-fade rounds through it.
        self._window = torch.from_numpy(np.hamming(2 * self.held_samples)).to(self._device)
        tokens = [*speaker.tokens.tolist(), *[SILENCE] * self.lookahead]
        with torch.inference_mode():
            self._embedding = speaker.embedding[None].to(self._device)
            primed = flow.setup_cache(
                torch.tensor([tokens], dtype=torch.int32, device=self._device),
                speaker.mel[None].to(self._device),
                self._embedding,
                n_timesteps=STEPS,
            )
            self._primed = {name: cache.clone() for name, cache in primed.items()}

    @classmethod
    def load(
        cls, folder: Path, *, device: str = "cpu", threads: int = 1, speaker: Path | None = None
    ) -> Token2Wav:
        """The token2wav of `folder` (`<checkpoint>/assets/token2wav`), with
        the voice of `speaker` (default: the folder's speaker.pt). Sets
        torch's threads for the process."""
        import torch

        torch.set_num_threads(threads)
        names = (stepaudio.FLOW_CONFIG, stepaudio.FLOW_WEIGHTS, stepaudio.HIFT_WEIGHTS)
        config, flow_weights, hift_weights = paths = [folder / name for name in names]
        for path in paths:
            if not path.is_file():
                raise MissingAssetError(f"MiniCPM-o's token2wav ({path})")
        flow = stepaudio.build_flow(config.read_text(), steps=STEPS, frames=CACHE_FRAMES)
        flow.load_state_dict(_weights(flow_weights), strict=True)
        hift = stepaudio.build_hift(_weights(hift_weights))
        voice = stepaudio.Speaker.read(speaker or folder / stepaudio.SPEAKER)
        return cls(flow.to(device).eval(), hift.to(device).eval(), voice, device)

    def stream(self) -> Token2WavStream:
        """A new turn."""
        return Token2WavStream(self)

    def _decode(
        self, codes: list[int], state: _State, *, last: bool, call: int
    ) -> tuple[np.ndarray, _State]:
        """One flow call, the package's `Token2wav.stream`: `codes` (carried
        ones first) and a turn's `state` in, its audio and next state out."""
        import torch

        device = [] if self._device.type == "cpu" else [self._device]
        with self._lock, torch.inference_mode(), torch.random.fork_rng(devices=device):
            torch.manual_seed(call)
            mel, flow = self._flow.inference_chunk(
                token=torch.tensor([codes], dtype=torch.int32, device=self._device),
                spk=self._embedding,
                cache=state.flow,
                last_chunk=last,
                n_timesteps=STEPS,
            )
            # The solver's caches are views of its shared scratch: copied out.
            flow = {
                "conformer_cnn_cache": flow["conformer_cnn_cache"].clone(),
                "conformer_att_cache": self._cut(flow["conformer_att_cache"], dim=3),
                "estimator_cnn_cache": flow["estimator_cnn_cache"].clone(),
                "estimator_att_cache": self._cut(flow["estimator_att_cache"], dim=4),
            }
            mel = torch.cat([state.mel, mel], dim=2)
            speech, source = self._hift(mel, state.source)
            if state.speech.shape[-1] > 0:
                speech = self._fade(speech, state.speech)
            held = self.held_samples
            after = _State(
                flow=flow,
                mel=mel[..., -HIFT_HELD_FRAMES:].clone(),
                source=source[:, :, -held:].clone(),
                speech=speech[:, -held:].clone(),
            )
            if not last:
                speech = speech[:, :-held]
            audio = speech[0].float().cpu().numpy()
        return audio, after

    def _start(self) -> _State:
        import torch

        empty = torch.zeros(1, 0, device=self._device)
        return _State(
            flow=self._primed,
            mel=torch.zeros(1, int(self._flow.output_size), 0, device=self._device),
            source=empty[None],
            speech=empty,
        )

    def _cut(self, cache: torch.Tensor, *, dim: int) -> torch.Tensor:
        """The cache of the prompt's length and the last 100 frames, once it
        is longer (the package's order: the newest frames come first)."""
        import torch

        if cache.shape[dim] <= self._prompt_frames + CACHE_TAIL_FRAMES:
            return cache.clone()
        head = cache.narrow(dim, 0, self._prompt_frames)
        tail = cache.narrow(dim, cache.shape[dim] - CACHE_TAIL_FRAMES, CACHE_TAIL_FRAMES)
        return torch.cat([head, tail], dim=dim)

    def _fade(self, speech: torch.Tensor, held: torch.Tensor) -> torch.Tensor:
        n = self.held_samples
        faded = speech.clone()
        faded[..., :n] = speech[..., :n] * self._window[:n] + held[..., -n:] * self._window[n:]
        return faded


class _State:
    """What one turn carries between flow calls: the flow's caches, HiFT's
    held mel frames, source and speech."""

    def __init__(
        self,
        *,
        flow: dict[str, torch.Tensor],
        mel: torch.Tensor,
        source: torch.Tensor,
        speech: torch.Tensor,
    ) -> None:
        self.flow = flow
        self.mel = mel
        self.source = source
        self.speech = speech


class Token2WavStream:
    """One assistant turn: codes in as the talker makes them, audio out."""

    def __init__(self, token2wav: Token2Wav) -> None:
        self._t2w = token2wav
        self._state = token2wav._start()
        self._carried = [SILENCE] * token2wav.lookahead
        self._pending: list[int] = []
        self._calls = 0
        self._finished = False

    def push(self, codes: Sequence[int], *, last: bool = False) -> np.ndarray:
        """The float32 samples at 24 kHz that `codes` complete; `last` ends
        the turn and flushes what was held back. BadSpeechCode for a code
        outside the vocabulary (nothing is taken then)."""
        if self._finished:
            raise StreamFinished("this turn's last codes were pushed")
        bad = [c for c in codes if not 0 <= c < self._t2w.vocabulary]
        if bad:
            raise BadSpeechCode(f"speech codes are 0..{self._t2w.vocabulary - 1}, not {bad[:5]}")
        self._pending.extend(int(c) for c in codes)
        parts: list[np.ndarray] = []
        while len(self._pending) > self._t2w.max_codes:
            parts.append(self._call(self._t2w.max_codes, last=False))
        if last or (self._calls > 0 and self._pending) or len(self._pending) >= self._t2w.min_codes:
            parts.append(self._call(len(self._pending), last=last))
        self._finished = last
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def _call(self, n: int, *, last: bool) -> np.ndarray:
        codes = [*self._carried, *self._pending[:n]]
        audio, self._state = self._t2w._decode(codes, self._state, last=last, call=self._calls)
        del self._pending[:n]
        self._carried = codes[-self._t2w.lookahead :]
        self._calls += 1
        return audio


def _weights(path: Path) -> dict[str, Any]:
    import torch

    loaded: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return loaded
