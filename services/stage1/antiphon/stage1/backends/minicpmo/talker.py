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

A turn's state is its position, its cache (per layer a key and a value
tensor `[1, kv_heads, position, head_dim]`) and its own random generator,
seeded by its session, so that what one session says does not depend on
who else is speaking. One unit is one batch row today; several sessions'
rows in one forward is for the GPU later.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from antiphon.common.assets import MissingAssetError
from antiphon.common.minicpmo import talker_weights as tw

if TYPE_CHECKING:
    import numpy as np
    import torch
    from transformers import DynamicCache, LlamaModel

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
    cache: DynamicCache | None = field(default=None, repr=False)

    @property
    def first(self) -> bool:
        """No unit of this turn spoken yet (the official `tts_text_start_pos == 0`)."""
        return self.position == 0

    def reset(self) -> None:
        self.position = 0
        self.cache = None


def sample_code(
    logits: torch.Tensor,
    recent: Sequence[int],
    *,
    temperature: float,
    eos: int,
    eos_allowed: bool,
    generator: torch.Generator,
) -> int:
    """One code from one step's logits `[codes]`: temperature, then the
    penalty for each time a code is among `recent`'s last 16, then EOS
    masked unless allowed; greedy at temperature 0."""
    import torch

    scores = logits.float()
    if temperature > 0:
        scores = scores / temperature
    if recent:
        window = torch.tensor(recent[-PENALTY_WINDOW:], device=scores.device)
        counts = torch.bincount(window, minlength=scores.shape[-1])
        alpha = torch.pow(REPETITION_PENALTY, counts.to(scores.dtype))
        # Dividing a negative logit would raise it; the official rule multiplies.
        scores = torch.where(scores < 0, scores * alpha, scores / alpha)
    if not eos_allowed:
        scores = scores.clone()
        scores[eos] = -torch.inf
    if temperature <= 0:
        return int(scores.argmax())
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


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

    def turn(self, *, seed: int, temperature: float = TEMPERATURE) -> TalkerTurn:
        """A new turn's state, its sampling drawn from `seed` alone."""
        import torch

        if temperature < 0:
            raise ValueError(f"temperature {temperature} is negative")
        generator = torch.Generator(device=self.device).manual_seed(seed)
        return TalkerTurn(generator=generator, temperature=temperature)

    def condition(self, token_ids: Sequence[int], hidden: np.ndarray | None) -> torch.Tensor:
        """A unit's condition `[len(token_ids) + 1, width]`; ValueError for an
        id outside the talker's text table or a hidden state of another
        shape than `[len(token_ids), thinker width]`."""
        import torch

        cfg = self.config
        bad = [i for i in token_ids if not 0 <= i < cfg.num_text_tokens]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside the talker's {cfg.num_text_tokens}")
        expected = (len(token_ids), cfg.llm_dim)
        if hidden is not None and tuple(hidden.shape) != expected:
            raise ValueError(f"hidden states are {tuple(hidden.shape)}, not {expected}")
        if not token_ids:
            return self._audio_bos
        ids = torch.tensor(list(token_ids), dtype=torch.long, device=self.device)
        embeds = self.emb_text(ids)
        if hidden is not None:
            projected = self.projector(torch.as_tensor(hidden, dtype=torch.float32).to(self.device))
            if cfg.normalize_projected_hidden:
                projected = torch.nn.functional.normalize(projected, p=2, dim=-1)
            embeds = embeds + projected
        return torch.cat([embeds, self._audio_bos])

    def speak(
        self,
        turn: TalkerTurn,
        token_ids: Sequence[int],
        hidden: np.ndarray | None,
        *,
        last: bool,
    ) -> list[int]:
        """The codes of one unit of `turn` (codes 0..6560, never EOS): 25
        mid-turn, at most 25 on its first or `last` unit; after `last` the
        turn starts afresh. `hidden` is the thinker's final hidden state per
        token, or None (see the module's docstring)."""
        import torch

        with torch.inference_mode():
            embeds = self.condition(token_ids, hidden)
            fewest = 0 if turn.first or last else UNIT_STEPS
            codes: list[int] = []
            for step in range(UNIT_STEPS):
                logits = self._forward(turn, embeds)
                code = sample_code(
                    logits,
                    codes,
                    temperature=turn.temperature,
                    eos=self.config.eos,
                    eos_allowed=step >= fewest,
                    generator=turn.generator,
                )
                if code == self.config.eos or step == UNIT_CODES:
                    break
                codes.append(code)
                embeds = self.emb_code(torch.tensor([code], device=self.device))
        if last:
            turn.reset()
        return codes

    def _forward(self, turn: TalkerTurn, embeds: torch.Tensor) -> torch.Tensor:
        """The code logits after `embeds` `[n, width]` enter the turn's cache at its position."""
        import torch
        from transformers import DynamicCache

        if turn.cache is None:
            turn.cache = DynamicCache()
        positions = torch.arange(turn.position, turn.position + embeds.shape[0], device=self.device)
        out = self.backbone(
            inputs_embeds=embeds.unsqueeze(0),
            position_ids=positions.unsqueeze(0),
            past_key_values=turn.cache,
            use_cache=True,
        )
        turn.position += embeds.shape[0]
        return torch.mv(self.head, out.last_hidden_state[0, -1])


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
