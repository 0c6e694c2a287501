"""The flow caches of one batch of token2wav streams (token2wav.py), each
stream's its row: the conformer's `[rows, ...]` and `[depth, rows, ...]`,
the solver's `[steps, depth, 2 x rows, ...]`, a stream's guided and free
rows side by side. A stream's own caches are views of its batch's, so the
streams of one batch can go on to the next second's as they are, with no
copy; streams from several batches are copied together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch


class Placed(Protocol):
    """A stream's state: its batch's caches and its row in them."""

    flow: Cohort
    place: tuple[int, int]


class Cohort:
    """One batch's flow caches (the module's docstring says their layout)."""

    def __init__(
        self,
        *,
        conformer_cnn: torch.Tensor,
        conformer_att: torch.Tensor,
        estimator_cnn: torch.Tensor,
        estimator_att: torch.Tensor,
    ) -> None:
        self.conformer_cnn = conformer_cnn
        self.conformer_att = conformer_att
        self.estimator_cnn = estimator_cnn
        self.estimator_att = estimator_att
        self.rows = conformer_cnn.shape[0]

    @classmethod
    def primed(cls, caches: dict[str, torch.Tensor], att_dtype: torch.dtype) -> Cohort:
        """The one stream of the package's `setup_cache`, the solver's
        attention caches in `att_dtype`. They are nearly all of a stream's
        memory (ten steps' keys and values of every DiT block); kept in
        float16, the DiT's attention still runs in float32 on them (its
        blocks concatenate them to the new frames' float32 keys and values),
        and the new frames' are rounded as they are written back."""
        return cls(
            conformer_cnn=caches["conformer_cnn_cache"].clone(),
            conformer_att=caches["conformer_att_cache"].clone(),
            estimator_cnn=caches["estimator_cnn_cache"].clone(),
            estimator_att=caches["estimator_att_cache"].to(att_dtype, copy=True),
        )

    def row(self, row: int) -> Cohort:
        return Cohort(
            conformer_cnn=self.conformer_cnn[row : row + 1],
            conformer_att=self.conformer_att[:, row : row + 1],
            estimator_cnn=self.estimator_cnn[:, :, 2 * row : 2 * row + 2],
            estimator_att=self.estimator_att[:, :, 2 * row : 2 * row + 2],
        )

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        """One row's shapes."""
        one = self.row(0)
        return tuple(
            tuple(t.shape)
            for t in (one.conformer_cnn, one.conformer_att, one.estimator_cnn, one.estimator_att)
        )

    @staticmethod
    def stack(states: Sequence[Placed]) -> Cohort:
        """The caches of `states`' streams as one batch's: an earlier
        batch's as they are when these are all its streams in its order
        (a second's batch again), else their rows copied together."""
        import torch

        first = states[0].flow
        if first.rows == len(states) and all(
            s.flow is first and s.place[1] == row for row, s in enumerate(states)
        ):
            return first
        rows = [s.flow.row(s.place[1]) for s in states]
        return Cohort(
            conformer_cnn=torch.cat([r.conformer_cnn for r in rows], dim=0),
            conformer_att=torch.cat([r.conformer_att for r in rows], dim=1),
            estimator_cnn=torch.cat([r.estimator_cnn for r in rows], dim=2),
            estimator_att=torch.cat([r.estimator_att for r in rows], dim=2),
        )
