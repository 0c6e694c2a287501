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

Many streams' calls run as one batch (`push_batch`): streams whose caches
have the same length (all past their second unit, the caches cut back to
the same size) and whose calls have as many codes go through the flow
together, their caches one batch's (caches.py: a second's batch of the
same streams takes the last one's as they are). HiFT runs batched too, but
for its noisy source, which each stream draws alone.

Departures from the package: the solver's Euler steps are run here, each
step's caches kept as they come, since the package's solver writes them
into scratch sized for one stream (the step arithmetic is the package's, so
one stream alone is what it makes sample for sample). HiFT draws noise from
torch's global generator, so each call runs on a forked generator seeded
by the call's index in its turn (a stream's audio is then its own codes'
alone, the same on every run, in a batch or not); the flow's noise is drawn
from a fixed seed at load; a push longer than the caches hold is split into
several calls. One voice serves every stream, one batch at a time; each
stream keeps its own copy of the caches, some 0.6 GB at the published size
in float32, half that in float16 (`cache_dtype`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from antiphon.common.assets import MissingAssetError
from antiphon.common.minicpmo import stepaudio
from antiphon.stage1.backends.minicpmo.caches import Cohort
from antiphon.stage1.backends.minicpmo.cuda_graphs import outside_captures
from antiphon.stage1.backends.minicpmo.solver_steps import SolverSteps

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


def cache_dtype(setting: str, device: str) -> str:
    """The solver caches' dtype for stage1's `duplex_voice_cache` on `device`."""
    if setting != "auto":
        return setting
    return "float32" if device == "cpu" else "float16"


class BadSpeechCode(ValueError):
    """A code outside the flow's vocabulary (the talker's EOS included)."""


class StreamFinished(RuntimeError):
    """A push after the turn's last."""


class Token2Wav:
    """The flow, the vocoder and one speaker's primed caches, shared by every
    stream; one flow call runs at a time."""

    rate: int

    def __init__(
        self,
        flow: Any,
        hift: Any,
        speaker: stepaudio.Speaker,
        device: str,
        *,
        cache_dtype: str = "float32",
        solver_steps: str = "auto",
    ) -> None:
        import torch

        self._flow = flow
        self._hift = hift
        self._device = torch.device(device)
        self._lock = threading.Lock()
        self.cache_dtype = cache_dtype
        # A solver step's DiT call: the package's own ("direct"), or through
        # buffers that outlive it (solver_steps.py), "graphs" capturing it.
        if solver_steps == "auto":
            solver_steps = "direct" if self._device.type == "cpu" else "graphs"
        self._steps = (
            None
            if solver_steps == "direct"
            else SolverSteps(flow.decoder.estimator, capture=solver_steps == "graphs")
        )
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
            self._primed = Cohort.primed(primed, getattr(torch, cache_dtype))

    @classmethod
    def load(
        cls,
        folder: Path,
        *,
        device: str = "cpu",
        threads: int = 1,
        speaker: Path | None = None,
        cache_dtype: str = "float32",
        solver_steps: str = "auto",
    ) -> Token2Wav:
        """The token2wav of `folder` (`<checkpoint>/assets/token2wav`), with
        the voice of `speaker` (default: the folder's speaker.pt), keeping the
        solver's attention caches in `cache_dtype` (float16 halves a stream's
        memory; float32 is the package's, sample for sample) and running
        the solver's steps as `solver_steps` says (`__init__`). Sets torch's
        threads for the process."""
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
        return cls(
            flow.to(device).eval(),
            hift.to(device).eval(),
            voice,
            device,
            cache_dtype=cache_dtype,
            solver_steps=solver_steps,
        )

    def stream(self) -> Token2WavStream:
        """A new turn."""
        return Token2WavStream(self)

    def push_batch(
        self, pushes: Sequence[tuple[Token2WavStream, Sequence[int], bool]]
    ) -> list[np.ndarray]:
        """Each `(stream, codes, last)`'s float32 samples at 24 kHz, as
        `Token2WavStream.push` gives them, the streams' calls batched.
        BadSpeechCode or StreamFinished before anything is taken."""
        streams = [stream for stream, _, _ in pushes]
        if len({id(stream) for stream in streams}) != len(streams):
            raise ValueError("two pushes of one stream in a batch")
        for stream, codes, _ in pushes:
            stream.check(codes)
        calls = [stream.plan(codes, last=last) for stream, codes, last in pushes]
        parts: list[list[np.ndarray]] = [[] for _ in pushes]
        # A stream's calls run in order, each round one call of every stream that has one.
        for round_ in range(max((len(planned) for planned in calls), default=0)):
            due = [
                (row, planned[round_]) for row, planned in enumerate(calls) if round_ < len(planned)
            ]
            audio = self._calls([(streams[row], n, last) for row, (n, last) in due])
            for (row, _), samples in zip(due, audio, strict=True):
                parts[row].append(samples)
        return [np.concatenate(p) if p else np.zeros(0, dtype=np.float32) for p in parts]

    def _calls(self, calls: Sequence[tuple[Token2WavStream, int, bool]]) -> list[np.ndarray]:
        """One flow call of each stream, those of one shape in one batch."""
        import torch

        taken = [(stream, stream.take(n), last) for stream, n, last in calls]
        groups: dict[tuple[object, ...], list[int]] = {}
        for row, (stream, codes, last) in enumerate(taken):
            groups.setdefault((len(codes), last, stream.state.shape), []).append(row)
        audio: list[np.ndarray] = [np.zeros(0, dtype=np.float32)] * len(calls)
        with self._lock, torch.inference_mode():
            for rows in groups.values():
                # Streams of one earlier batch in its order can use its caches as they are.
                rows.sort(key=lambda row: taken[row][0].state.place)
                streams = [taken[row][0] for row in rows]
                last = taken[rows[0]][2]
                mel, flow = self._flow_batch([taken[row][1] for row in rows], streams, last)
                for row, samples in zip(rows, self._vocode(mel, flow, streams, last), strict=True):
                    audio[row] = samples
        return audio

    def _flow_batch(
        self, codes: Sequence[Sequence[int]], streams: Sequence[Token2WavStream], last: bool
    ) -> tuple[torch.Tensor, Cohort]:
        """The package's `inference_chunk` for several streams of one shape:
        their mels `[rows, bins, frames]` and next flow caches, all rows'."""
        import torch
        import torch.nn.functional as F

        flow = self._flow
        rows = len(codes)
        caches = Cohort.stack([stream.state for stream in streams])
        # The streams' caches now live in `caches` (or in their earlier batch's).
        for stream in streams:
            stream.state.release()
        tokens = torch.tensor([list(c) for c in codes], dtype=torch.int32, device=self._device)
        speaker = flow.spk_embed_affine_layer(F.normalize(self._embedding, dim=1))
        hidden, conformer_cnn, conformer_att = flow.encoder.forward_chunk(
            xs=flow.input_embedding(tokens),
            last_chunk=last,
            cnn_cache=caches.conformer_cnn,
            att_cache=caches.conformer_att,
        )
        mu = flow.encoder_proj(hidden).transpose(1, 2).contiguous()
        mel, estimator_cnn, estimator_att = self._solve(
            mu, speaker.expand(rows, -1), caches.estimator_cnn, caches.estimator_att
        )
        del caches
        return mel, Cohort(
            conformer_cnn=conformer_cnn.clone(),
            conformer_att=self._cut(conformer_att, dim=3),
            estimator_cnn=estimator_cnn,
            estimator_att=self._cut(estimator_att, dim=4),
        )

    def _solve(
        self, mu: torch.Tensor, speaker: torch.Tensor, cnn: torch.Tensor, att: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The flow's Euler solver (`solve_euler_chunk`) over the cosine
        schedule with classifier-free guidance, from the noise at the
        caches' offset: the mel `[rows, bins, frames]` and each step's
        caches, stacked. Each row is a guided and a free row side by side
        (one row alone is the package's order), and the arithmetic is the
        package's, step for step."""
        import torch

        cfm = self._flow.decoder
        rate = cfm.inference_cfg_rate
        rows, _, frames = mu.shape
        offset = att.shape[4]
        x = cfm.rand_noise[:, :, offset : offset + frames].expand(rows, -1, -1)
        schedule = torch.linspace(0, 1, STEPS + 1, device=mu.device, dtype=mu.dtype)
        schedule = 1 - torch.cos(schedule * 0.5 * torch.pi)
        t, dt = schedule[0].unsqueeze(0), schedule[1] - schedule[0]
        # The free rows see no encoder output and no speaker.
        mu_in = _beside(mu, torch.zeros_like(mu))
        speaker_in = _beside(speaker, torch.zeros_like(speaker))[:, :, None].expand(-1, -1, frames)
        cond_in = torch.zeros_like(mu_in)
        dit = cfm.estimator
        # The DiT's blocks write each step's caches where they are told: here
        # straight into this call's, not into its own scratch for one stream.
        step_cnn = cnn.new_empty((STEPS, *cnn.shape[1:]))
        step_att = att.new_empty((*att.shape[:4], att.shape[4] + frames, att.shape[5]))
        for step in range(1, STEPS + 1):
            # The DiT's `forward_chunk`: time embedded, inputs stacked on channels.
            inputs = torch.cat([x.repeat_interleave(2, dim=0), mu_in, speaker_in, cond_in], dim=1)
            embedded = dit.t_embedder(t.repeat(2 * rows)).unsqueeze(1)
            caches = (cnn[step - 1], att[step - 1], step_cnn[step - 1], step_att[step - 1])
            if self._steps is None:
                velocity = dit.blocks_forward_chunk(inputs, embedded, None, *caches)
            else:
                velocity = self._steps(inputs, embedded, *caches)
            velocity = velocity.view(rows, 2, *velocity.shape[1:])
            guided, free = velocity[:, 0], velocity[:, 1]
            x = x + dt * ((1.0 + rate) * guided - rate * free)
            t = t + dt
            if step < STEPS:
                dt = schedule[step + 1] - t
        return x, step_cnn, step_att

    def _vocode(
        self, mel: torch.Tensor, flow: Cohort, streams: Sequence[Token2WavStream], last: bool
    ) -> list[np.ndarray]:
        """HiFT over the streams' new mels `[rows, bins, frames]`, each
        cross-faded into what it held back: the package's `HiFTGenerator`
        forward, batched but for its noisy source, which each stream draws
        alone on its call index's seed. Sets each stream's next state."""
        import torch

        hift = self._hift
        mel = torch.cat([torch.cat([s.state.mel for s in streams]), mel], dim=2)
        f0 = hift.f0_predictor(mel)
        harmonics = hift.f0_upsamp(f0[:, None]).transpose(1, 2)
        device = [] if self._device.type == "cpu" else [self._device]
        sources = []
        for row, stream in enumerate(streams):
            with outside_captures(), torch.random.fork_rng(devices=device):
                torch.manual_seed(stream.calls - 1)
                source = hift.m_source(harmonics[row : row + 1])[0].transpose(1, 2)
            held = stream.state.source
            if held.shape[2] != 0:
                source[:, :, : held.shape[2]] = held
            sources.append(source)
        source = torch.cat(sources)
        speech = hift.decode(x=mel, s=source)
        audio: list[np.ndarray] = []
        n = self.held_samples
        for row, stream in enumerate(streams):
            said = speech[row : row + 1]
            if stream.state.speech.shape[-1] > 0:
                said = self._fade(said, stream.state.speech)
            stream.state = _State(
                flow=flow,
                place=(id(flow), row),
                mel=mel[row : row + 1, :, -HIFT_HELD_FRAMES:].clone(),
                source=source[row : row + 1, :, -n:].clone(),
                speech=said[:, -n:].clone(),
            )
            audio.append((said if last else said[:, :-n])[0].float().cpu().numpy())
        return audio

    def _start(self) -> _State:
        import torch

        empty = torch.zeros(1, 0, device=self._device)
        return _State(
            flow=self._primed,
            place=(id(self._primed), 0),
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


def _beside(guided: torch.Tensor, free: torch.Tensor) -> torch.Tensor:
    """Rows `[rows, ...]` of each, as `[2 x rows, ...]`: each guided row, then its free one."""
    import torch

    return torch.stack([guided, free], dim=1).flatten(0, 1)


class _State:
    """What one turn carries between flow calls: its row of a batch's flow
    caches (`flow`, `place`), HiFT's held mel frames, source and speech."""

    def __init__(
        self,
        *,
        flow: Cohort,
        place: tuple[int, int],
        mel: torch.Tensor,
        source: torch.Tensor,
        speech: torch.Tensor,
    ) -> None:
        self.flow = flow
        # The batch's identity and the stream's row in it.
        self.place = place
        self.mel = mel
        self.source = source
        self.speech = speech

    @property
    def shape(self) -> tuple[tuple[int, ...], ...]:
        """What decides whether two streams' calls can share a batch."""
        own = tuple(tuple(t.shape) for t in (self.mel, self.source, self.speech))
        return self.flow.shapes + own

    def release(self) -> None:
        """Lets go of the flow caches, now a batch's input."""
        del self.flow


class Token2WavStream:
    """One assistant turn: codes in as the talker makes them, audio out."""

    def __init__(self, token2wav: Token2Wav) -> None:
        self._t2w = token2wav
        self.state = token2wav._start()
        self._carried = [SILENCE] * token2wav.lookahead
        self._pending: list[int] = []
        # Flow calls made, the last one's index + 1.
        self.calls = 0
        self._finished = False

    def push(self, codes: Sequence[int], *, last: bool = False) -> np.ndarray:
        """The float32 samples at 24 kHz that `codes` complete; `last` ends
        the turn and flushes what was held back. BadSpeechCode for a code
        outside the vocabulary (nothing is taken then)."""
        return self._t2w.push_batch([(self, codes, last)])[0]

    def check(self, codes: Sequence[int]) -> None:
        """StreamFinished after the turn's last push, BadSpeechCode for a code
        outside the vocabulary."""
        if self._finished:
            raise StreamFinished("this turn's last codes were pushed")
        bad = [c for c in codes if not 0 <= c < self._t2w.vocabulary]
        if bad:
            raise BadSpeechCode(f"speech codes are 0..{self._t2w.vocabulary - 1}, not {bad[:5]}")

    def plan(self, codes: Sequence[int], *, last: bool) -> list[tuple[int, bool]]:
        """Takes `codes` in; the calls they make, each its count of new codes
        and whether it is the turn's last."""
        self._pending.extend(int(c) for c in codes)
        pending, calls = len(self._pending), self.calls
        planned: list[tuple[int, bool]] = []
        while pending > self._t2w.max_codes:
            planned.append((self._t2w.max_codes, False))
            pending -= self._t2w.max_codes
            calls += 1
        if last or (calls > 0 and pending) or pending >= self._t2w.min_codes:
            planned.append((pending, last))
        self._finished = last
        return planned

    def take(self, n: int) -> list[int]:
        """The next call's codes: the carried ones, then `n` new."""
        codes = [*self._carried, *self._pending[:n]]
        del self._pending[:n]
        self._carried = codes[-self._t2w.lookahead :]
        self.calls += 1
        return codes


def _weights(path: Path) -> dict[str, Any]:
    import torch

    loaded: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return loaded
