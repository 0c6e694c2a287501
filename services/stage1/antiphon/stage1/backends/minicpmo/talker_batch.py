"""One batch of the talker's units (talker.py `speak_batch`): the rows'
caches in one preallocated buffer, and the Llama's layers run over it here.

The buffer holds every column the batch can fill: each row's past
left-padded to the longest, then the conditions side by side (right-padded
to the widest), then a code a step. A row's keys and values for a column
are written in place, and a mask says which columns are real for which row
(a padded query still sees its row's real keys, so no row is ever wholly
masked). Afterwards each row keeps only its real positions.

The layers are the backbone's own modules (its norms, projections, rotary
embedding and MLP); the attention runs here, over the whole buffer with
the mask, so that a decode step reads and writes only tensors that outlive
it. On a GPU that lets a step be captured once as a CUDA graph and
replayed for the batch's other steps: a step of a 20-layer Llama is some
800 small kernels, and launching them one by one from Python, not the
arithmetic, is what a unit costs there (some 12 ms a step on an H100's
host). On a CPU every step runs as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from antiphon.stage1.backends.minicpmo.cuda_graphs import Graphed

if TYPE_CHECKING:
    import torch

    from antiphon.stage1.backends.minicpmo.talker import Talker, TalkerUnit


class TalkerBatch:
    def __init__(
        self,
        talker: Talker,
        units: Sequence[TalkerUnit],
        conditions: Sequence[torch.Tensor],
        steps: int,
    ) -> None:
        import torch

        self._talker = talker
        self._units = units
        device = talker.device
        cfg = talker.config
        past = [unit.turn.position for unit in units]
        longest = max(past)
        self._widest = max(condition.shape[0] for condition in conditions)
        rows = len(units)
        capacity = longest + self._widest + steps
        shape = (cfg.num_hidden_layers, rows, cfg.num_key_value_heads, capacity, cfg.head_dim)
        self.keys = torch.zeros(shape, device=device)
        self.values = torch.zeros(shape, device=device)
        # Which columns each row attends to, as SDPA reads it: `[rows, 1, 1, columns]`.
        self.mask = torch.zeros(rows, 1, 1, capacity, dtype=torch.bool, device=device)
        for row, unit in enumerate(units):
            start = longest - past[row]
            self.mask[row, ..., start:longest] = True
            if unit.turn.cache is not None:
                self.keys[:, row, :, start:longest] = unit.turn.cache[0]
                self.values[:, row, :, start:longest] = unit.turn.cache[1]
        # The next column to fill, and each row's next position.
        self._column = longest
        self._positions = past
        self._step: _Step | None = None

    def prefill(self, conditions: Sequence[torch.Tensor]) -> torch.Tensor:
        """The code logits `[rows, codes]` after each row's condition."""
        import torch

        device = self._talker.device
        widest, rows = self._widest, len(conditions)
        embeds = torch.zeros(rows, widest, conditions[0].shape[1], device=device)
        lengths = [condition.shape[0] for condition in conditions]
        for row, condition in enumerate(conditions):
            embeds[row, : lengths[row]] = condition
            self.mask[row, ..., self._column : self._column + lengths[row]] = True
        # Padding continues the row's positions: masked, it is never read.
        positions = torch.tensor(self._positions, device=device)[:, None] + torch.arange(
            widest, device=device
        )
        columns = torch.arange(self._column, self._column + widest, device=device)
        # Each new query sees its row's real columns up to its own.
        causal = torch.arange(self.mask.shape[-1], device=device) <= columns[:, None]
        hidden = layers(self._talker.backbone, embeds, positions, columns, self, self.mask & causal)
        self._column += widest
        for row, n in enumerate(lengths):
            self._positions[row] += n
        index = torch.tensor([n - 1 for n in lengths], device=device)
        return self._talker.logits(hidden[torch.arange(rows, device=device), index])

    def step(self, embeds: torch.Tensor, alive: Sequence[bool]) -> torch.Tensor:
        """The code logits `[rows, codes]` after one code per row `[rows, width]`;
        rows not `alive` are fed masked."""
        import torch

        device = self._talker.device
        self.mask[:, 0, 0, self._column] = torch.tensor(alive, device=device)
        positions = torch.tensor(self._positions, device=device)[:, None]
        if self._step is None:
            talker = self._talker
            graphs = talker.cuda_graphs and device.type == "cuda"
            self._step = _Step(talker.backbone, self, embeds, graphs=graphs)
        hidden = self._step(embeds, positions, self._column)
        self._column += 1
        for row, is_alive in enumerate(alive):
            self._positions[row] += int(is_alive)
        return self._talker.logits(hidden)

    def keep(self) -> None:
        """Each row's real positions become its turn's cache."""
        for row, unit in enumerate(self._units):
            real = self.mask[row, 0, 0, : self._column].nonzero().squeeze(1)
            unit.turn.cache = (
                self.keys[:, row].index_select(2, real),
                self.values[:, row].index_select(2, real),
            )
            unit.turn.position = self._positions[row]


class _Step:
    """One decode step of a batch, over inputs where a CUDA graph of it
    reads them (cuda_graphs.py): eager on a CPU, replayed on a GPU."""

    def __init__(
        self, backbone: Any, batch: TalkerBatch, embeds: torch.Tensor, *, graphs: bool
    ) -> None:
        import torch

        self._batch = batch
        self._backbone = backbone
        self._embeds = torch.zeros_like(embeds)[:, None]
        self._positions = torch.zeros(embeds.shape[0], 1, dtype=torch.long, device=embeds.device)
        self._columns = torch.zeros(1, dtype=torch.long, device=embeds.device)
        self._run = Graphed(self._layers, capture=graphs)

    def __call__(self, embeds: torch.Tensor, positions: torch.Tensor, column: int) -> torch.Tensor:
        self._embeds.copy_(embeds[:, None])
        self._positions.copy_(positions)
        self._columns.fill_(column)
        return self._run()

    def _layers(self) -> torch.Tensor:
        batch = self._batch
        hidden = layers(
            self._backbone, self._embeds, self._positions, self._columns, batch, batch.mask
        )
        return hidden[:, -1]


def layers(
    backbone: Any,
    embeds: torch.Tensor,
    positions: torch.Tensor,
    columns: torch.Tensor,
    batch: TalkerBatch,
    mask: torch.Tensor,
) -> torch.Tensor:
    """The Llama's last states `[rows, n, width]` for `embeds` `[rows, n,
    width]` at `positions` `[rows, n]`, their keys and values written into
    `batch`'s buffers at `columns` `[n]`, each query attending where `mask`
    (`[rows, 1, n or 1, columns]`) says: the layers of transformers'
    `LlamaModel`, with its modules, the attention over the whole buffer."""
    import torch.nn.functional as F
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    rows, n, _ = embeds.shape
    cos, sin = backbone.rotary_emb(embeds, positions)
    x = embeds
    for index, layer in enumerate(backbone.layers):
        attention = layer.self_attn
        h = layer.input_layernorm(x)
        q = attention.q_proj(h).view(rows, n, -1, attention.head_dim).transpose(1, 2)
        k = attention.k_proj(h).view(rows, n, -1, attention.head_dim).transpose(1, 2)
        v = attention.v_proj(h).view(rows, n, -1, attention.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        keys, values = batch.keys[index], batch.values[index]
        keys.index_copy_(2, columns, k)
        values.index_copy_(2, columns, v)
        attended = F.scaled_dot_product_attention(
            q,
            keys,
            values,
            attn_mask=mask,
            scale=attention.scaling,
            enable_gqa=keys.shape[1] != q.shape[1],
        )
        x = x + attention.o_proj(attended.transpose(1, 2).reshape(rows, n, -1))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    out: torch.Tensor = backbone.norm(x)
    return out
