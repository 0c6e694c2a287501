"""NeMo's forced turn-taking, for a batch of rows: a checkpoint that sets
`force_turn_taking` has its text channel corrected from its transcript of
the user (the ASR channel), as NeMo's inference does
(`DuplexSTTStreamingInference._maybe_apply_forced_turn_taking`).

At a row's step t (counted from its session's start, a prompt's positions
included, as NeMo counts them):

- the user has ended (the ASR channel says the tokenizer's EOS, or a
  legacy `user_eos_token`), or has been silent for `pad_window` steps
  after saying something: the model takes the turn, its token becomes BOS,
  unless it said BOS within the last `threshold` steps;
- else the user has begun (the ASR channel says BOS, or a legacy
  `user_bos_token`): the model gives the turn back, its token becomes EOS,
  unless it said EOS within the last `threshold` steps.

Each row keeps the last `threshold` tokens it said and the last
`pad_window` + 1 it heard, so a step costs the same however long the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from nemo.collections.speechlm2.models.duplex_stt_model import DuplexSTTModel

# A history slot before the session's first step: equal to no token.
_NONE = -1


class TurnTaking:
    def __init__(self, stt: DuplexSTTModel, rows: int, device: torch.device) -> None:
        cfg = stt.cfg
        # NeMo applies it only where the model transcribes the user.
        self.on = bool(cfg.get("force_turn_taking", False)) and bool(stt.predict_user_text)
        self._threshold = int(cfg.get("force_turn_taking_threshold", 40))
        self._pad_window = int(cfg.get("force_turn_taking_pad_window", 25))
        self._pad, self._bos, self._eos = stt.text_pad_id, stt.text_bos_id, stt.text_eos_id
        ends = [stt.tokenizer.eos, *_legacy(stt, "user_eos_token")]
        begins = [stt.text_bos_id, *_legacy(stt, "user_bos_token")]
        self._user_ends = torch.tensor(ends, dtype=torch.long, device=device)
        self._user_begins = torch.tensor(begins, dtype=torch.long, device=device)
        # Oldest first; the last column is the step before this one.
        self._said = _nothing(rows, self._threshold, device)
        self._heard = _nothing(rows, self._pad_window + 1, device)
        self._t = torch.zeros(rows, dtype=torch.long, device=device)

    def reset(self, mask: torch.Tensor) -> None:
        """Rows `mask` start a new session."""
        self._said[mask] = _NONE
        self._heard[mask] = _NONE
        self._t[mask] = 0

    def prompted(self, row: int, length: int) -> None:
        """Row `row` took in a prompt of `length` positions: NeMo counts them,
        and holds padding in both channels there."""
        pads = torch.full((1, length), self._pad, dtype=torch.long, device=self._t.device)
        self._said[row] = _shifted(self._said[row : row + 1], pads)[0]
        self._heard[row] = _shifted(self._heard[row : row + 1], pads)[0]
        self._t[row] += length

    def correct(self, said: torch.Tensor, heard: torch.Tensor) -> torch.Tensor:
        """The rows' text tokens `said` [rows], given what they transcribed
        of the user this step (`heard` [rows]), with the turns forced."""
        if not self.on:
            return said
        t, window = self._t, self._pad_window
        # NeMo's loop starts at step 1 and skips the first `pad_window` steps.
        due = t >= max(window, 1)
        recent, before = self._heard[:, 1:], self._heard[:, 0]
        silent = (
            (recent == self._pad).all(dim=1) & (t > window) & (before != self._pad)
            if window > 0
            else torch.zeros_like(due)
        )
        ended = torch.isin(heard, self._user_ends) | silent
        began = torch.isin(heard, self._user_begins) & ~ended
        take = due & ended & ~(self._said == self._bos).any(dim=1)
        give = due & began & ~(self._said == self._eos).any(dim=1)
        said = torch.where(take, self._bos, said)
        return torch.where(give, self._eos, said)

    def record(self, said: torch.Tensor, heard: torch.Tensor) -> None:
        """This step's final tokens (what goes back in), into the histories."""
        if not self.on:
            return
        self._said = _shifted(self._said, said[:, None])
        self._heard = _shifted(self._heard, heard[:, None])
        self._t += 1


def _nothing(rows: int, steps: int, device: torch.device) -> torch.Tensor:
    return torch.full((rows, steps), _NONE, dtype=torch.long, device=device)


def _shifted(history: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """`history` [rows, n] with `new` [rows, k] appended, the oldest dropped."""
    n = history.shape[1]
    if n == 0:
        return history
    return torch.cat([history, new], dim=1)[:, -n:]


def _legacy(stt: DuplexSTTModel, key: str) -> list[int]:
    """Older checkpoints name the user's turn marks as text (`^`, `$`)."""
    text = stt.cfg.get(key)
    return [int(stt.tokenizer.text_to_ids(text)[0])] if text is not None else []
