"""Nemotron VoiceChat's perception, heard live: one 80 ms frame per row a step.

NeMo's own inference runs `stt.perception` (mel preprocessor, FastConformer,
modality adapter, projection) over a whole recording before the LLM steps.
A server hears each session as it comes, so this runs the same modules
frame by frame, for `rows` sessions at once, each at its own point in its
session, with the encoder's cache-aware streaming (`streaming_cfg`,
`get_initial_cache_state`, `cache_aware_stream_step`).

Which frame a step gives: perception frame i is centred on mel column 8i
(80 ms x i), so n frames of audio yield n + 1 frames, the last resting on a
column past the audio (masked to zero). Step n of a session (its first is
step 1) gives frame n - 1, the newest one that is final: what
`stt.perception` gives for it over the session's first n frames of audio
and over the whole session alike. Offline, the LLM's step i reads frame i;
so it does here.

Each step recomputes from a rolling window of raw audio the mel columns the
encoder's subsampling needs for the new frame: the frame's own and
`pre_encode_cache_size` before them, as NeMo's
CacheAwareStreamingAudioBuffer feeds a chunk, with enough audio left of them
that the STFT and pre-emphasis see what they see over the whole input.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from nemo.collections.speechlm2.models.duplex_stt_model import DuplexSTTModel

FRAME_SAMPLES = 1280  # 80 ms at 16 kHz


class Hearing:
    def __init__(self, stt: DuplexSTTModel, rows: int) -> None:
        from nemo.collections.speechlm2.modules.perception import IdentityConnector

        perception = stt.perception
        self._preprocessor = perception.preprocessor
        self._encoder = perception.encoder
        self._adapter = perception.modality_adapter
        self._proj = perception.proj
        if not isinstance(self._adapter, IdentityConnector):
            # An adapter with context over time (a Conformer, a Q-former)
            # would need streaming state of its own.
            raise ValueError(f"cannot stream modality adapter {type(self._adapter).__name__}")
        featurizer = self._preprocessor.featurizer
        # NeMo's streaming settings for the encoder's own attention context.
        self._encoder.setup_streaming_params()
        _check_streamable(featurizer, self._encoder)
        cfg = self._encoder.streaming_cfg
        hop = int(featurizer.hop_length)
        self._shift = int(cfg.shift_size[1])  # mel columns a frame
        if self._shift * hop != FRAME_SAMPLES:
            raise ValueError(
                f"the encoder's frame is {self._shift * hop} samples, not {FRAME_SAMPLES}"
            )
        # A chunk: the frame's columns and those before them that the
        # subsampling convolutions reach; it yields `drop` frames before the
        # one it is for, which NeMo drops once a stream is under way.
        self._chunk = int(cfg.pre_encode_cache_size[1]) + self._shift
        self._drop = int(cfg.drop_extra_pre_encoded)
        if self._chunk - 1 != self._drop * self._shift:
            raise ValueError(f"unexpected subsampling chunk: {cfg}")
        # Whole columns of audio left of a chunk's first: the STFT reaches
        # n_fft // 2 samples left of a column's centre, pre-emphasis one more.
        self._margin = math.ceil((featurizer.n_fft // 2 + 1) / hop)
        # The window ends at the newest sample, a frame's columns after the
        # newest chunk's last.
        self._window_cols = self._margin + self._chunk - 1 + self._shift
        self._window = self._window_cols * hop

        self.rows = rows
        first = next(perception.parameters())
        self._device, self._dtype = first.device, first.dtype
        self._audio = torch.zeros(rows, self._window, device=self._device)
        self._frames = torch.zeros(rows, dtype=torch.long, device=self._device)
        channel, time, channel_len = self._encoder.get_initial_cache_state(
            batch_size=rows, dtype=self._dtype, device=self._device
        )
        self._cache_channel: torch.Tensor = channel
        self._cache_time: torch.Tensor = time
        self._cache_channel_len: torch.Tensor = channel_len

    @torch.no_grad()
    def step(self, audio: torch.Tensor) -> torch.Tensor:
        """audio: [rows, 1280] float32 in [-1, 1], one 80 ms frame per row;
        returns [rows, H]: each row's perception embedding for this step's
        frame (frame n - 1 at a session's step n: the module's docstring says
        why), as `stt.perception` gives it over the row's whole input so far,
        not yet multiplied by `duplex_user_channel_weight`."""
        if audio.shape != (self.rows, FRAME_SAMPLES):
            raise ValueError(
                f"expected audio [{self.rows}, {FRAME_SAMPLES}], got {list(audio.shape)}"
            )
        self._audio = torch.cat([self._audio[:, FRAME_SAMPLES:], audio.to(self._audio)], dim=1)
        lengths = torch.full((self.rows,), self._window, dtype=torch.long, device=self._device)
        mel, _ = self._preprocessor(input_signal=self._audio, length=lengths)
        ones = torch.ones(self.rows, dtype=torch.long, device=self._device)
        encoded, encoded_len, channel, time, channel_len = self._encoder.cache_aware_stream_step(
            processed_signal=self._subsampled(mel),
            processed_signal_length=ones,
            cache_last_channel=self._cache_channel,
            cache_last_time=self._cache_time,
            cache_last_channel_len=self._cache_channel_len,
            keep_all_outputs=True,
            bypass_pre_encode=True,
        )
        self._cache_channel, self._cache_time, self._cache_channel_len = channel, time, channel_len
        self._frames += 1
        adapted, _ = self._adapter(audio_signal=encoded, length=encoded_len)
        embedded: torch.Tensor = self._proj(adapted.transpose(1, 2))
        return embedded[:, -1]

    def _subsampled(self, mel: torch.Tensor) -> torch.Tensor:
        """Each row's new frame out of the subsampling: [rows, 1, d_model].

        Run here rather than inside `cache_aware_stream_step`, which drops the
        same number of leading frames from every row: a session's first
        `drop` frames have fewer columns before them than a chunk holds. Their
        chunk starts at the session's first column, so the convolutions pad
        it with zeros as over the whole input, and their frame comes earlier
        in it; the convolutions are causal, so what follows it is moot."""
        lead = self._frames.clamp(max=self._drop)  # frames before this one in its chunk
        first = self._margin + self._chunk - 1 - self._shift * lead
        index = first[:, None] + torch.arange(self._chunk, device=self._device)
        index = index.clamp(max=self._window_cols - 1)
        chunk = mel.gather(2, index[:, None, :].expand(-1, mel.shape[1], -1))
        lengths = torch.full((self.rows,), self._chunk, dtype=torch.long, device=self._device)
        frames, _ = self._encoder.pre_encode(
            x=chunk.transpose(1, 2).to(self._dtype), lengths=lengths
        )
        picked: torch.Tensor = frames.gather(1, lead[:, None, None].expand(-1, 1, frames.shape[2]))
        return picked

    def reset(self, mask: torch.Tensor) -> None:
        """mask: [rows] bool; those rows start afresh at their next step (a
        new session), the others undisturbed."""
        mask = mask.to(self._device)
        # Silence before a session is what the whole input's zero padding is.
        self._audio[mask] = 0.0
        self._frames[mask] = 0
        self._cache_channel[:, mask] = 0.0
        self._cache_time[:, mask] = 0.0
        self._cache_channel_len[mask] = 0


def _check_streamable(featurizer: Any, encoder: Any) -> None:
    """Refuse what hearing frame by frame cannot give as the whole input does."""
    if featurizer.normalize in ("per_feature", "all_features"):
        raise ValueError(f"mel normalization {featurizer.normalize!r} spans the whole input")
    if featurizer.frame_splicing != 1:
        raise ValueError("spliced mel frames reach past the newest column")
    # Any lookahead (right context in attention or convolutions, non-causal
    # subsampling) would need audio after the frame.
    factor = encoder.subsampling_factor
    cfg = encoder.streaming_cfg
    causal = (
        getattr(encoder.pre_encode, "is_causal", False)
        and encoder.conv_context_size[1] == 0
        and cfg.chunk_size == [1, factor]
        and cfg.shift_size == [1, factor]
        and cfg.cache_drop_size == 0
        and cfg.valid_out_len == 1
    )
    if not causal:
        raise ValueError(f"the encoder is not causal at one frame a step: {cfg}")
