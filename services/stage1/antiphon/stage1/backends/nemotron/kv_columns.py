"""The EAR-TTS backbone's key/value cache, shared by rows whose sessions
started at different steps: one column a step for every row, each row
seeing only its own.

Why columns and not a cache per row: the backbone (a Gemma3) attends a
session's whole history, and stepping every row in one batch needs every
row's keys in one tensor. Rows that joined at different steps have histories
of different lengths; stacking per-row caches each step would copy every
row's history every 80 ms. Here a step appends one column to all rows
(written in place, the buffer grown by doubling), and each row's attention
mask lets it see the columns of its own session only.

What makes that exact, RoPE notwithstanding: Gemma3 rotates a key by its
position before caching it, and attention after that depends on nothing but
which keys a query sees and the positions it was rotated with. So each row
carries its own positions (its query at step k of its session is rotated as
position P + k, P the prompt's length, whatever column it lands in), its
sliding-window layers see the keys within the window of *its* positions, and
a column it cannot see (another session's, or its own sat-out step's) adds
exactly zero to its softmax. A fresh session therefore computes what NeMo's
single-session cache does.

The speaker prompt's prefill is the same for every session (same speaker,
same text), so its keys are computed once and kept in the first P columns
for all rows, forever: a row that starts afresh sees them and none of its
old columns. Columns no row can see any more (sessions that ended, steps
every row sat out, keys past every sliding window when all layers slide) are
dropped now and then, so a long-running worker's cache is as long as its
oldest live session, not its uptime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# Room for this many steps beyond the prompt before the first growth.
_FIRST_ROOM = 64
# Compact once this many columns are dead and they are a quarter of the cache.
_MIN_DEAD = 64


class KvColumns:
    """A transformers-style cache (`update(keys, values, layer_idx)`) whose
    attention masks and position ids come from `begin`, one step at a time."""

    def __init__(
        self,
        prompt_keys: Sequence[torch.Tensor],
        prompt_values: Sequence[torch.Tensor],
        rows: int,
        *,
        sliding_window: int | None,
        all_sliding: bool,
        additive_masks: bool,
    ) -> None:
        """`prompt_keys[layer]`: the prompt's keys, [1, heads, P, head_dim]."""
        import torch

        first = prompt_keys[0]
        self.prompt_length = p = first.shape[2]
        if sliding_window is not None and p >= sliding_window:
            raise ValueError(f"a {p}-frame prompt does not fit a {sliding_window}-frame window")
        self.rows = rows
        self._window = sliding_window
        # With every layer sliding, keys past every row's window are dead too.
        self._all_sliding = all_sliding and sliding_window is not None
        self._additive = additive_masks
        capacity = p + _FIRST_ROOM
        self._keys = [self._room(k, rows, capacity) for k in prompt_keys]
        self._values = [self._room(v, rows, capacity) for v in prompt_values]
        device = first.device
        # valid[r, c]: column c is of row r's session; pos[r, c]: its position there.
        self._valid = torch.zeros(rows, capacity, dtype=torch.bool, device=device)
        self._valid[:, :p] = True
        self._pos = torch.zeros(rows, capacity, dtype=torch.long, device=device)
        self._pos[:, :p] = torch.arange(p, device=device)
        # The position of each row's next query.
        self._next = torch.full((rows,), p, dtype=torch.long, device=device)
        self.length = p
        self._writing: int | None = None

    @staticmethod
    def _room(prompt: torch.Tensor, rows: int, capacity: int) -> torch.Tensor:
        _, heads, p, dim = prompt.shape
        buffer = prompt.new_zeros(rows, heads, capacity, dim)
        buffer[:, :, :p] = prompt
        return buffer

    # --- rows ---------------------------------------------------------------

    def reset(self, rows: torch.Tensor) -> None:
        """Rows (a bool mask) start afresh: the prompt, none of their columns."""
        self._valid[rows, self.prompt_length :] = False
        self._next[rows] = self.prompt_length

    # --- one step -------------------------------------------------------------

    def begin(self, stepping: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Open the next column: the backbone's position ids ([rows, 1]) and
        its masks by layer type ([rows, 1, 1, columns]) for one step of the
        rows in `stepping`; the others' outputs are to be ignored and their
        state does not move."""
        n = self.length
        if n == self._valid.shape[1]:
            self._grow()
        query = self._next.clone()
        self._valid[:, n] = stepping
        self._pos[:, n] = query
        self._next += stepping.long()
        self._writing = n
        seen = self._valid[:, : n + 1]
        masks = {"full_attention": seen, "sliding_attention": seen}
        if self._window is not None:
            near = query[:, None] - self._pos[:, : n + 1] < self._window
            masks["sliding_attention"] = seen & near
        shaped = {kind: self._as_mask(mask[:, None, None, :]) for kind, mask in masks.items()}
        return query[:, None], shaped

    def _as_mask(self, allowed: torch.Tensor) -> torch.Tensor:
        """SDPA takes a bool mask; eager attention adds a float one."""
        if not self._additive:
            return allowed
        import torch

        dtype = self._keys[0].dtype
        blocked = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
        return blocked.masked_fill(~allowed, torch.finfo(dtype).min)

    def update(
        self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's keys and values for layer `layer_idx` (what a Gemma3
        attention calls): written in the open column; every column so far back."""
        n = self._writing
        if n is None:
            raise RuntimeError("KvColumns.update outside a step (call begin first)")
        self._keys[layer_idx][:, :, n : n + 1] = keys
        self._values[layer_idx][:, :, n : n + 1] = values
        return self._keys[layer_idx][:, :, : n + 1], self._values[layer_idx][:, :, : n + 1]

    def end(self) -> None:
        """Close the step's column; drop dead ones if there are enough."""
        self._writing = None
        self.length += 1
        self._compact()

    # --- room -----------------------------------------------------------------

    def _grow(self) -> None:
        import torch

        more = self._valid.shape[1]
        self._keys = [torch.cat([k, torch.zeros_like(k[:, :, :more])], 2) for k in self._keys]
        self._values = [torch.cat([v, torch.zeros_like(v[:, :, :more])], 2) for v in self._values]
        self._valid = torch.cat([self._valid, torch.zeros_like(self._valid)], 1)
        self._pos = torch.cat([self._pos, torch.zeros_like(self._pos)], 1)

    def live(self) -> torch.Tensor:
        """Columns some row may still see (the prompt's always)."""
        n = self.length
        seen = self._valid[:, :n]
        if self._all_sliding:
            assert self._window is not None
            seen = seen & (self._next[:, None] - self._pos[:, :n] < self._window)
        keep = seen.any(0)
        keep[: self.prompt_length] = True
        return keep

    def _compact(self) -> None:
        keep = self.live()
        dead = self.length - int(keep.sum())
        if dead < max(_MIN_DEAD, self.length // 4):
            return
        import torch

        index = keep.nonzero().squeeze(1)
        kept = index.numel()
        for store in (self._keys, self._values):
            for i, buffer in enumerate(store):
                fresh = torch.zeros_like(buffer)
                fresh[:, :, :kept] = buffer.index_select(2, index)
                store[i] = fresh
        valid = torch.zeros_like(self._valid)
        valid[:, :kept] = self._valid.index_select(1, index)
        pos = torch.zeros_like(self._pos)
        pos[:, :kept] = self._pos.index_select(1, index)
        self._valid, self._pos = valid, pos
        self.length = kept
