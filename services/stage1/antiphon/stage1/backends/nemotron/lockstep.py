"""The `nemotron` backend's model: Nemotron VoiceChat's speaking half (NeMo's
DuplexEARTTS and its RVQ codec), a batch row per session, stepped in
lockstep (frames/lockstep.py).

Each step takes every row's frame (the LLM's text token for it), makes one
frame of audio codes per row with EAR-TTS (tts_rows.py) and decodes them to
1,764 samples at 22,050 Hz with the codec (codec_rows.py). A row a session
takes, or one nobody holds, starts afresh: its TTS state returns to the
speaker prompt's (prompt.py) and its codec stream to silence, without
touching the other rows.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from antiphon.stage1.frames.lockstep import Batch, Lockstep
from antiphon.stage1.frames.session import Pcm
from antiphon.stage1.metrics import DuplexMetrics
from antiphon.stage1.settings import Stage1Settings

if TYPE_CHECKING:
    import torch
    from nemo.collections.speechlm2.models.duplex_ear_tts import DuplexEARTTS

    from antiphon.stage1.backends.nemotron.prompt import Prompt

log = logging.getLogger(__name__)


class SpeakingRows:
    """EAR-TTS and the codec over the same rows: a step's tokens to its audio."""

    def __init__(self, tts: DuplexEARTTS, prompt: Prompt, rows: int) -> None:
        import torch

        from antiphon.stage1.backends.nemotron.codec_rows import CodecRows
        from antiphon.stage1.backends.nemotron.tts_rows import TtsRows

        with torch.inference_mode():
            self.tts = TtsRows(tts, prompt, rows)
            self.codec = CodecRows(tts, rows)

    def step(
        self, tokens: torch.Tensor, stepping: torch.Tensor, afresh: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows in `afresh` start a new session, then those in `stepping`
        speak a frame of `tokens` ([rows]): its codes ([rows, codebooks]) and
        samples ([rows, samples]); the others' are zero, their state kept."""
        import torch

        with torch.inference_mode():
            self.tts.reset(afresh)
            self.codec.reset(afresh)
            codes = self.tts.step(tokens, stepping)
            return codes, self.codec.decode(codes, stepping)


class NemotronLockstep(Lockstep):
    def __init__(
        self,
        tts: DuplexEARTTS,
        prompt: Prompt,
        slots: int,
        *,
        metrics: DuplexMetrics | None = None,
        gather_s: float = 0.005,
        poll_s: float | None = None,
    ) -> None:
        super().__init__(
            slots,
            frame_width=1,  # the LLM's one text token a frame
            cardinality=len(tts.tokenizer.tokenizer),
            name="nemotron",
            metrics=metrics,
            gather_s=gather_s,
            poll_s=poll_s,
        )
        # The codec's rate and frame (22,050 Hz, 1,764 samples: 80 ms).
        self.rate = int(tts.target_sample_rate)
        self.frame_ms = round(1000 * int(tts.target_samples_per_frame) / self.rate)
        self._device: torch.device = prompt.code.device
        self.rows = SpeakingRows(tts, prompt, slots)

    def _run(self, batch: Batch) -> Pcm:
        """On the model's thread (inference mode is per thread, so it is set there)."""
        import torch

        stepping = torch.from_numpy(batch.stepping).to(self._device)
        afresh = torch.from_numpy(batch.reset | ~batch.held).to(self._device)
        tokens = torch.from_numpy(batch.values[:, 0]).to(self._device)
        _, samples = self.rows.step(tokens, stepping, afresh)
        pcm: Pcm = samples.cpu().numpy()
        return pcm

    def _close_model(self) -> None:
        """Nothing to leave: the rows' state goes with the object."""


def load(settings: Stage1Settings, metrics: DuplexMetrics) -> NemotronLockstep:
    """The model `settings` name, with a row per session the worker admits."""
    if not settings.duplex_checkpoint:
        raise SystemExit(
            "stage1 backend nemotron needs duplex_checkpoint (ANTIPHON_DUPLEX_CHECKPOINT): "
            "the local Nemotron VoiceChat checkpoint folder stage0 serves, or random:tiny"
        )
    import torch

    from antiphon.common import moshi_checkpoint
    from antiphon.common.nemotron import checkpoint as nemotron_checkpoint
    from antiphon.stage1.backends.nemotron import prompt

    torch.set_num_threads(settings.duplex_threads)
    checkpoint = nemotron_checkpoint.resolve(settings.duplex_checkpoint)
    device = moshi_checkpoint.device(settings.duplex_device)
    tts = checkpoint.tts(device)
    prefilled = prompt.prefill(tts, prompt.speaker(checkpoint, tts))
    log.info(
        "nemotron speech loaded",
        extra={"checkpoint": checkpoint.name, "device": str(device), "prompt": prefilled.length},
    )
    return NemotronLockstep(
        tts,
        prefilled,
        settings.capacity,
        metrics=metrics,
        gather_s=settings.duplex_gather_ms / 1000,
    )
