"""The RVQ codec's decoder streamed over a batch of rows: one frame of codes
in, one frame of samples out (1,764 at 22,050 Hz), each row a stream of its own.

NeMo's codec decodes a stream frame by frame through a `CausalConv1dCache`
(its causal convolutions' and its inverse STFT's left context, per layer);
its first frame starts from zeros. Here that cache is kept per row: a step
decodes the rows that have a frame (their slices gathered into one cache
and written back), so a row that sits a step out keeps its context as it
was, and a row that starts afresh has its slices zeroed, which is what a
new cache holds. Control codes (speech BOS, EOS, pad) are decoded as the
codec's silence frame, as NeMo's incremental decoding does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from nemo.collections.speechlm2.models.duplex_ear_tts import DuplexEARTTS


class CodecRows:
    def __init__(self, tts: DuplexEARTTS, rows: int) -> None:
        self._tts = tts
        self._codec = tts.audio_codec
        self.rows = rows
        self.samples = int(tts.target_samples_per_frame)
        # Per cache entry of the codec (a layer's left context): [rows, ...].
        self._state: dict[int | str, torch.Tensor] = {}

    def reset(self, rows: torch.Tensor) -> None:
        """Rows (a bool mask) start afresh."""
        for context in self._state.values():
            context[rows] = 0

    def decode(self, codes: torch.Tensor, stepping: torch.Tensor) -> torch.Tensor:
        """Samples ([rows, samples], float32) of one frame of `codes`
        ([rows, codebooks]) for the rows in `stepping`; the others' are zero
        and their streams do not move. Call in inference mode."""
        import torch
        from nemo.collections.speechlm2.models.duplex_ear_tts import (
            ensures_target_precision,
            replace_control_speech_codes,
        )
        from nemo.collections.speechlm2.modules.ear_tts_vae_codec import CausalConv1dCache

        pcm = torch.zeros(self.rows, self.samples, dtype=torch.float32, device=codes.device)
        index = stepping.nonzero().squeeze(1)
        if index.numel() == 0:
            return pcm
        cache = CausalConv1dCache()
        cache.cache = {key: context.index_select(0, index) for key, context in self._state.items()}
        frame = replace_control_speech_codes(
            codes.index_select(0, index)[:, None],
            self._tts._control_codes,
            self._tts.codec_silence_tokens,
        )
        with ensures_target_precision(self._tts.audio_codec_run_dtype):
            wav, _ = self._codec.decode(frame, cache=cache)
        for key, context in cache.cache.items():
            if key not in self._state:
                self._state[key] = context.new_zeros(self.rows, *context.shape[1:])
            self._state[key][index] = context
        pcm[index] = wav[:, 0].float()
        return pcm
