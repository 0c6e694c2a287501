"""The `mimi` backend's decoder: one Mimi in streaming mode, a batch row per
session, stepped in lockstep (frames/lockstep.py).

Rows without a frame sit the step out: Mimi's exec mask is False for them,
so their streaming state does not move. A row a session takes is reset on
its own (Mimi's `reset_streaming` with a row mask).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from antiphon.common import moshi_checkpoint
from antiphon.stage1.frames.lockstep import Batch, Lockstep
from antiphon.stage1.frames.session import Pcm
from antiphon.stage1.metrics import DuplexMetrics
from antiphon.stage1.settings import Stage1Settings

if TYPE_CHECKING:
    import torch
    from moshi.models.compression import MimiModel

log = logging.getLogger(__name__)


class MimiLockstep(Lockstep):
    def __init__(
        self,
        mimi: MimiModel,
        slots: int,
        *,
        metrics: DuplexMetrics | None = None,
        gather_s: float = 0.005,
        poll_s: float | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__(
            slots,
            frame_width=mimi.num_codebooks,
            cardinality=mimi.cardinality,
            name="mimi",
            metrics=metrics,
            gather_s=gather_s,
            poll_s=poll_s,
        )
        self._mimi = mimi
        self._device: torch.device = next(iter(mimi.parameters())).device
        self._compile = compile
        # Entered once for the worker's life: every row's state lives in it.
        self._streaming = mimi.streaming(slots)

    @property
    def num_codebooks(self) -> int:
        return self.frame_width

    def _run(self, batch: Batch) -> Pcm:
        """On the decoder thread (grad mode is per thread, so it is set here)."""
        import torch

        mask = torch.from_numpy(batch.stepping).to(self._device)
        codes = torch.from_numpy(batch.values).to(self._device).unsqueeze(-1)
        with torch.no_grad(), moshi_checkpoint.compile_mode(self._compile):
            if batch.reset.any():
                self._mimi.reset_streaming(torch.from_numpy(batch.reset).to(self._device))
            self._mimi.set_exec_mask(mask)
            out = self._mimi.decode(codes)
            pcm: Pcm = out[:, 0].cpu().numpy()
        return pcm

    def _close_model(self) -> None:
        """Leave streaming mode."""
        self._streaming.close()


def load(
    settings: Stage1Settings, metrics: DuplexMetrics, *, poll_s: float | None = None
) -> MimiLockstep:
    """The decoder `settings` name, with a row per session the worker admits."""
    if not settings.duplex_checkpoint:
        raise SystemExit(
            "stage1 backend mimi needs duplex_checkpoint (ANTIPHON_DUPLEX_CHECKPOINT): "
            "the local Moshi or PersonaPlex checkpoint folder stage0 serves, or random:7b"
        )
    if not settings.duplex_compile:
        moshi_checkpoint.disable_compile_by_default()
    import torch

    torch.set_num_threads(settings.duplex_threads)
    checkpoint = moshi_checkpoint.resolve(settings.duplex_checkpoint)
    mimi = checkpoint.mimi(moshi_checkpoint.device(settings.duplex_device))
    log.info(
        "mimi decoder loaded",
        extra={"checkpoint": checkpoint.name, "device": str(next(mimi.parameters()).device)},
    )
    return MimiLockstep(
        mimi,
        settings.capacity,
        metrics=metrics,
        gather_s=settings.duplex_gather_ms / 1000,
        poll_s=poll_s,
        compile=settings.duplex_compile,
    )
