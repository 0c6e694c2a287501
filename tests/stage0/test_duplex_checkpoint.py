"""A checkpoint folder as PersonaPlex ships one: its 16-step depth transformer
loads into moshi's 8-step model and gives the agent's codebooks unchanged, an
empty config.json means moshi's own config, and the weights' shape says
"PersonaPlex" without loading them."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from antiphon.common import moshi_checkpoint
from tests.stage0.duplex_reference import SEED

if TYPE_CHECKING:
    from moshi.models.lm import LMModel

pytestmark = pytest.mark.models


def tiny_tokenizer(path: Path) -> None:
    """A real sentencepiece model, trained here on a few sentences."""
    import sentencepiece

    sentences = ["hello there", "you are a helpful assistant", "say something kind"] * 20
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=24,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    path.write_bytes(model.getvalue())


def fused(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The depth transformer's per-step projections as PersonaPlex's file holds
    them: one fused weight per layer (moshi splits it at load)."""
    out: dict[str, torch.Tensor] = {}
    groups: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for key, value in state.items():
        for split, joined in (("in_projs", "in_proj_weight"), ("out_projs", "out_proj.weight")):
            marker = f".self_attn.{split}."
            if key.startswith("depformer.") and marker in key:
                prefix, rest = key.split(marker)
                groups.setdefault(f"{prefix}.self_attn.{joined}", []).append(
                    (int(rest.split(".")[0]), value)
                )
                break
        else:
            out[key] = value
    for key, parts in groups.items():
        out[key] = torch.cat([value for _, value in sorted(parts, key=lambda p: p[0])])
    return out


def personaplex_folder(folder: Path) -> tuple[moshi_checkpoint.Checkpoint, LMModel]:
    """random:tiny's shape with a 16-step depth transformer, saved as a folder."""
    from moshi.models.lm import LMModel
    from safetensors.torch import save_file

    tiny = moshi_checkpoint.resolve("random:tiny")
    assert tiny.lm_config is not None and tiny.mimi_config is not None
    torch.manual_seed(SEED)
    sixteen = LMModel(device="cpu", dtype=torch.float32, **{**tiny.lm_config, "dep_q": 16})
    sixteen.eval()
    state = {k: v.contiguous() for k, v in fused(sixteen.state_dict()).items()}
    assert state["depformer.layers.0.self_attn.in_proj_weight"].shape[0] == 16 * 3 * 32
    save_file(state, str(folder / moshi_checkpoint.LM_FILE))
    save_file(tiny.mimi("cpu").state_dict(), str(folder / moshi_checkpoint.MIMI_FILE))
    (folder / "mimi.json").write_text(json.dumps(tiny.mimi_config))
    config = {**copy.deepcopy(tiny.lm_config), "mimi_config_name": "mimi.json"}
    (folder / "config.json").write_text(json.dumps(config))
    tiny_tokenizer(folder / moshi_checkpoint.TOKENIZER_FILE)
    return moshi_checkpoint.resolve(str(folder)), sixteen


def test_a_16_step_depth_transformer_loads_trimmed_and_gives_the_same_agent_codebooks(
    tmp_path: Path,
) -> None:
    checkpoint, sixteen = personaplex_folder(tmp_path)
    assert checkpoint.depformer_steps == 16 and checkpoint.personaplex
    lm = checkpoint.lm("cpu", torch.float32)
    assert lm.dep_q == 8 and len(lm.depformer_in) == 8
    assert checkpoint.text_tokenizer() is not None
    torch.manual_seed(0)
    transformer_out = torch.randn(2, 1, 64)
    tokens = torch.randint(0, 8, (2, 1, 1))
    with torch.no_grad():
        got: list[torch.Tensor] = []
        want: list[torch.Tensor] = []
        for model, into in ((lm, got), (sixteen, want)):
            assert model.depformer is not None
            with model.depformer.streaming(2):
                previous = tokens
                for cb in range(8):
                    logits = model.forward_depformer(cb, previous, transformer_out)
                    into.append(logits)
                    previous = logits.argmax(-1)
    for cb in range(8):
        # The same weights; a different cache size may round differently.
        torch.testing.assert_close(got[cb], want[cb])


def test_an_empty_config_means_moshis_own_7b_config(tmp_path: Path) -> None:
    for name in (moshi_checkpoint.LM_FILE, moshi_checkpoint.MIMI_FILE):
        from safetensors.torch import save_file

        save_file({"depformer_in.0.weight": torch.zeros(1)}, str(tmp_path / name))
    (tmp_path / moshi_checkpoint.TOKENIZER_FILE).write_bytes(b"")
    (tmp_path / "config.json").write_text("{}")
    checkpoint = moshi_checkpoint.resolve(str(tmp_path))
    assert checkpoint.lm_config is None and checkpoint.num_codebooks == 8
    # One depformer step on file, 8 in the model: not PersonaPlex-shaped.
    assert checkpoint.depformer_steps == 1 and not checkpoint.personaplex


def test_trimming_leaves_nothing_else_out() -> None:
    """Only the depth transformer's surplus steps go: a surplus layer stays for
    the strict load to refuse."""
    wanted = {"depformer_in.0.weight": (2, 2), "transformer.layers.0.x.weight": (2, 2)}
    shapes = {
        "depformer_in.0.weight": (2, 2),
        "depformer_in.1.weight": (2, 2),
        "transformer.layers.0.x.weight": (2, 2),
        "transformer.layers.1.x.weight": (2, 2),
    }
    assert moshi_checkpoint.trim_to(shapes, wanted) == {
        "depformer_in.0.weight": None,
        "transformer.layers.0.x.weight": None,
        "transformer.layers.1.x.weight": None,
    }
