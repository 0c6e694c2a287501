"""MiniCPM-o 4.5's talker: the thinker's text of one 1-second unit in, 25
S3 codec tokens out, as the official duplex loop makes them
(`MiniCPMODuplex` and `MiniCPMTTS.generate_chunk`).

A unit's condition is, per thinker token, the talker's embedding of its id
plus the L2-normalised projection of the thinker's final hidden state where
that token was fed, then the embedding of `audio_bos`. From it the Llama
samples up to 26 codes, each fed back through the codec's table; the 26th
is discarded unfed, so a mid-turn unit, whose EOS is masked, yields exactly
25 codes (1.0 s). The first unit of a turn and its last may stop at EOS
anywhere, even before their first code. A turn's cache and positions run on
across its units and start afresh after its last.

Sampling is the official one: temperature 0.8, then a repetition penalty of
1.05 per occurrence among the unit's last 16 codes (the official window
holds only codes of the unit being made), no top-k or top-p (the official
code builds those warpers and never applies them). Temperature 0 is greedy.

Departure: stage0 does not yet hand over hidden states, so `hidden` may be
None, and the condition is then the token embeddings alone. The talker was
trained with both; it says something, not what the published model says.

A turn's state is its position, its cache (keys and values of every layer,
`[layers, kv_heads, position, head_dim]`) and its own random generator,
seeded by its session, so that what one session says does not depend on
who else is speaking.

Units of many turns are spoken in one batch (`speak_batch`): one forward a
step for all of them (talker_batch.py: the rows' caches side by side, the
padding masked; on a GPU the steps replay one captured CUDA graph). A row
that stopped at EOS rides on masked until the batch ends. Afterwards each
row keeps only its real positions, so a turn's cache never holds another's
padding.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from antiphon.common.assets import MissingAssetError
from antiphon.common.minicpmo import talker_weights as tw
from antiphon.stage1.backends.minicpmo.talker_batch import TalkerBatch

if TYPE_CHECKING:
    import numpy as np
    import torch
    from transformers import LlamaModel

UNIT_CODES = 25
# The official loop samples one code past the unit and drops it (its EOS
# mask lasts all 26 steps), so the next unit starts from the 25th code.
UNIT_STEPS = UNIT_CODES + 1
TEMPERATURE = 0.8
REPETITION_PENALTY = 1.05
PENALTY_WINDOW = 16


@dataclass
class TalkerTurn:
    """One assistant turn's talker state; after its last unit it starts
    afresh, so a session may keep one across turns."""

    generator: torch.Generator
    temperature: float
    position: int = 0
    # Keys and values `[layers, kv_heads, position, head_dim]`, None at position 0.
    cache: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)

    @property
    def first(self) -> bool:
        """No unit of this turn spoken yet (the official `tts_text_start_pos == 0`)."""
        return self.position == 0

    def reset(self) -> None:
        self.position = 0
        self.cache = None


@dataclass
class TalkerUnit:
    """One unit of one turn to speak: the thinker's text ids, their hidden
    states or None, and whether the unit ends the turn."""

    turn: TalkerTurn
    token_ids: Sequence[int]
    hidden: np.ndarray | None
    last: bool


def sample_codes(
    logits: torch.Tensor,
    recents: Sequence[Sequence[int]],
    *,
    temperatures: Sequence[float],
    eos: int,
    eos_allowed: Sequence[bool],
    generators: Sequence[torch.Generator],
) -> list[int]:
    """One code per row of one step's logits `[rows, codes]`: temperature,
    then the penalty for each time a code is among the row's `recents`' last
    16, then EOS masked unless allowed; greedy at temperature 0. Each row
    draws from its own generator, one draw a step."""
    import torch

    scores = logits.float()
    rows = scores.shape[0]
    temperature = torch.tensor(temperatures, device=scores.device).unsqueeze(1)
    scores = torch.where(temperature > 0, scores / temperature.clamp(min=1e-30), scores)
    windows = [list(recent[-PENALTY_WINDOW:]) for recent in recents]
    if any(windows):
        # Every row's window in one tensor (one copy to the device, not one a
        # row), padded with code 0 at weight 0.
        width = max(len(window) for window in windows)
        padded = [[*window, *[0] * (width - len(window))] for window in windows]
        weights = [[1.0] * len(window) + [0.0] * (width - len(window)) for window in windows]
        counts = torch.zeros_like(scores).scatter_add_(
            1,
            torch.tensor(padded, device=scores.device),
            torch.tensor(weights, device=scores.device),
        )
        alpha = torch.pow(REPETITION_PENALTY, counts)
        # Dividing a negative logit would raise it; the official rule multiplies.
        scores = torch.where(scores < 0, scores * alpha, scores / alpha)
    barred = torch.tensor([not allowed for allowed in eos_allowed], device=scores.device)
    scores[:, eos] = torch.where(barred, -torch.inf, scores[:, eos])
    greedy = scores.argmax(dim=-1)
    probs = torch.softmax(scores, dim=-1)
    picks = [
        greedy[row]
        if temperatures[row] <= 0
        else torch.multinomial(probs[row], 1, generator=generators[row])[0]
        for row in range(rows)
    ]
    # One transfer for the batch, not one per row.
    return [int(code) for code in torch.stack(picks).tolist()]


def sample_code(
    logits: torch.Tensor,
    recent: Sequence[int],
    *,
    temperature: float,
    eos: int,
    eos_allowed: bool,
    generator: torch.Generator,
) -> int:
    """`sample_codes` for one row's logits `[codes]`."""
    return sample_codes(
        logits.unsqueeze(0),
        [recent],
        temperatures=[temperature],
        eos=eos,
        eos_allowed=[eos_allowed],
        generators=[generator],
    )[0]


class Talker:
    def __init__(
        self,
        cfg: tw.TalkerConfig,
        tensors: dict[str, torch.Tensor],
        *,
        device: str = "cpu",
    ) -> None:
        """The talker of `cfg` from its `tts.` tensors (`talker_weights.shapes`);
        MissingAssetError naming a missing one, ValueError for a wrong shape."""
        import torch
        from torch import nn

        self.config = cfg
        self.device = torch.device(device)
        # On a GPU, each batch's decode steps replay one captured CUDA graph
        # (talker_batch.py); False runs them eagerly, to compare.
        self.cuda_graphs = True
        for name, shape in tw.shapes(cfg).items():
            if name not in tensors:
                raise MissingAssetError("MiniCPM-o talker weight", name)
            if tuple(tensors[name].shape) != shape:
                got = tuple(tensors[name].shape)
                raise ValueError(f"talker weight {name} is {got}, its config says {shape}")

        def weight(name: str) -> torch.Tensor:
            return tensors[name].to(self.device, torch.float32)

        self.emb_text = _table(weight(tw.PREFIX + "emb_text.weight"))
        self.emb_code = _table(weight(tw.PREFIX + "emb_code.0.weight"))
        # Weight norm at dim 0 (a norm per code), folded once: norm * direction / |direction|.
        directions = weight(tw.HEAD_DIRECTIONS)
        norms = weight(tw.HEAD_NORMS)
        self.head = norms * directions / directions.norm(dim=1, keepdim=True)
        self.projector = nn.Sequential(
            nn.Linear(cfg.llm_dim, cfg.hidden_size),
            nn.ReLU(),
            nn.Linear(cfg.hidden_size, cfg.hidden_size),
        )
        projector = tw.PREFIX + "projector_semantic."
        self.projector.load_state_dict(
            {
                "0.weight": weight(projector + "linear1.weight"),
                "0.bias": weight(projector + "linear1.bias"),
                "2.weight": weight(projector + "linear2.weight"),
                "2.bias": weight(projector + "linear2.bias"),
            }
        )
        self.backbone = _backbone(cfg, self.device)
        model = tw.PREFIX + "model."
        state = {k.removeprefix(model): v for k, v in tensors.items() if k.startswith(model)}
        # The Llama's own token table is never read (inputs are embeddings):
        # _backbone gives it one row, and the published one is dropped, as are
        # rotary frequencies an older transformers may have saved (they are computed).
        state = {
            k: v for k, v in state.items() if k != "embed_tokens.weight" and "rotary_emb" not in k
        }
        missing, unexpected = self.backbone.load_state_dict(state, strict=False)
        if unexpected or set(missing) != {"embed_tokens.weight"}:
            raise ValueError(f"talker backbone: missing {missing}, unexpected {unexpected}")
        self.projector.to(self.device)
        for module in (self.projector, self.backbone):
            module.eval().requires_grad_(False)
        self._audio_bos: torch.Tensor = self.emb_text(
            torch.tensor([cfg.audio_bos_token_id], device=self.device)
        )

    @classmethod
    def load(cls, folder: Path, *, device: str = "cpu", threads: int = 1) -> Talker:
        """The talker of a checkpoint folder: `config.json`'s `tts_config` and
        the `tts.` tensors of its safetensors files. `threads` sets torch's
        intra-op threads for the whole process (a worker serves one model)."""
        import torch
        from safetensors import safe_open

        torch.set_num_threads(threads)
        config_path = folder / "config.json"
        if not config_path.is_file():
            raise MissingAssetError(f"MiniCPM-o checkpoint {folder}", "no config.json")
        cfg = tw.read_config(json.loads(config_path.read_text()))
        tensors: dict[str, torch.Tensor] = {}
        for path in sorted(folder.glob("*.safetensors")):
            with safe_open(str(path), framework="pt") as handle:
                for name in handle.keys():  # safe_open is no mapping
                    if name.startswith(tw.PREFIX):
                        tensors[name] = handle.get_tensor(name)
        return cls(cfg, tensors, device=device)

    @classmethod
    def drawn(cls, folder: Path, *, device: str = "cpu", threads: int = 1) -> Talker:
        """The talker of a checkpoint folder's `tts_config` with random
        weights drawn here (`random:4.5`, which has no weights file)."""
        import torch

        torch.set_num_threads(threads)
        cfg = tw.read_config(json.loads((folder / "config.json").read_text()))
        return cls(cfg, tw.random(cfg), device=device)

    def turn(self, *, seed: int, temperature: float = TEMPERATURE) -> TalkerTurn:
        """A new turn's state, its sampling drawn from `seed` alone."""
        import torch

        if temperature < 0:
            raise ValueError(f"temperature {temperature} is negative")
        generator = torch.Generator(device=self.device).manual_seed(seed)
        return TalkerTurn(generator=generator, temperature=temperature)

    def check(self, token_ids: Sequence[int], hidden: np.ndarray | None) -> None:
        """ValueError for an id outside the talker's text table or a hidden
        state of another shape than `[len(token_ids), thinker width]`."""
        cfg = self.config
        bad = [i for i in token_ids if not 0 <= i < cfg.num_text_tokens]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside the talker's {cfg.num_text_tokens}")
        expected = (len(token_ids), cfg.llm_dim)
        if hidden is not None and tuple(hidden.shape) != expected:
            raise ValueError(f"hidden states are {tuple(hidden.shape)}, not {expected}")

    def condition(self, token_ids: Sequence[int], hidden: np.ndarray | None) -> torch.Tensor:
        """A unit's condition `[len(token_ids) + 1, width]`; ValueError as `check`."""
        import torch

        self.check(token_ids, hidden)
        if not token_ids:
            return self._audio_bos
        ids = torch.tensor(list(token_ids), dtype=torch.long, device=self.device)
        embeds = self.emb_text(ids)
        if hidden is not None:
            projected = self.projector(torch.as_tensor(hidden, dtype=torch.float32).to(self.device))
            if self.config.normalize_projected_hidden:
                projected = torch.nn.functional.normalize(projected, p=2, dim=-1)
            embeds = embeds + projected
        return torch.cat([embeds, self._audio_bos])

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """The code logits `[rows, codes]` of the backbone's last states `[rows, width]`."""
        out: torch.Tensor = states @ self.head.T
        return out

    def speak(
        self,
        turn: TalkerTurn,
        token_ids: Sequence[int],
        hidden: np.ndarray | None,
        *,
        last: bool,
    ) -> list[int]:
        """The codes of one unit of `turn`: `speak_batch` of that unit alone."""
        return self.speak_batch([TalkerUnit(turn, token_ids, hidden, last)])[0]

    def speak_batch(self, units: Sequence[TalkerUnit]) -> list[list[int]]:
        """The codes of each unit (0..6560, never EOS), one forward a step for
        all: 25 mid-turn, at most 25 on a turn's first or last unit; after
        its last a turn starts afresh. A unit's `hidden` is the thinker's
        final hidden state per token, or None (see the module's docstring).
        ValueError as `check` before anything runs; no two units may share a turn."""
        import torch

        if len({id(unit.turn) for unit in units}) != len(units):
            raise ValueError("two units of one turn in a batch")
        with torch.inference_mode():
            conditions = [self.condition(unit.token_ids, unit.hidden) for unit in units]
            batch = TalkerBatch(self, units, conditions, UNIT_CODES)
            logits = batch.prefill(conditions)
            rows = range(len(units))
            fewest = [0 if unit.turn.first or unit.last else UNIT_STEPS for unit in units]
            codes: list[list[int]] = [[] for _ in rows]
            alive = [True for _ in rows]
            for step in range(UNIT_STEPS):
                # A stopped row draws no more: its generator stays where alone it would.
                live = [row for row in rows if alive[row]]
                picks = sample_codes(
                    logits[live] if len(live) < len(units) else logits,
                    [codes[row] for row in live],
                    temperatures=[units[row].turn.temperature for row in live],
                    eos=self.config.eos,
                    eos_allowed=[step >= fewest[row] for row in live],
                    generators=[units[row].turn.generator for row in live],
                )
                for row, code in zip(live, picks, strict=True):
                    if code == self.config.eos or step == UNIT_CODES:
                        alive[row] = False
                    else:
                        codes[row].append(code)
                if not any(alive):
                    break
                fed = [row_codes[-1] if row_codes else 0 for row_codes in codes]
                logits = batch.step(self.emb_code(torch.tensor(fed, device=self.device)), alive)
            batch.keep()
        for unit in units:
            if unit.last:
                unit.turn.reset()
        return codes


def _table(weight: torch.Tensor) -> torch.nn.Embedding:
    from torch import nn

    return nn.Embedding(weight.shape[0], weight.shape[1], _weight=weight, _freeze=True)


def _backbone(cfg: tw.TalkerConfig, device: torch.device) -> LlamaModel:
    """The Llama of `cfg`: its attention is transformers' default (SDPA)."""
    import torch
    from transformers import LlamaConfig, LlamaModel

    llama = LlamaConfig(
        vocab_size=1,
        bos_token_id=None,
        eos_token_id=None,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=tw.RMS_NORM_EPS,
        rope_parameters={"rope_type": "default", "rope_theta": tw.ROPE_THETA},
    )
    with torch.device(device):
        return LlamaModel(llama)
