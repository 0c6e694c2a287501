"""MiniCPM-o 4.5's talker (minicpmo/talker.py) at a tiny random shape: a
turn spoken unit by unit through its cache says what a recompute of the
whole turn says; a mid-turn unit is 25 codes, never EOS, while a turn's
first and last units may stop at EOS; a session's codes depend on its own
seed and inputs alone; the weights load under the published names."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from antiphon.common.assets import MissingAssetError
from antiphon.common.minicpmo import talker_weights as tw
from antiphon.common.minicpmo import tiny
from antiphon.stage1.backends.minicpmo.talker import (
    UNIT_CODES,
    UNIT_STEPS,
    Talker,
    TalkerTurn,
    TalkerUnit,
    sample_code,
)

if TYPE_CHECKING:
    from antiphon.common.minicpmo.config import MiniCPMOConfig

# The tiny thinker's vocabulary (tiny.py's trained tokenizer) and width.
THINKER_VOCAB = 300
THINKER_WIDTH = int(tiny.SHAPE["hidden_size"])

Unit = tuple[list[int], np.ndarray | None, bool]


def _thinker(folder: Path) -> MiniCPMOConfig:
    """The tiny thinker's configuration, written into `folder`'s config.json."""
    thinker = tiny.config(THINKER_VOCAB, tiny.SHAPE)
    thinker.save_pretrained(str(folder))
    return thinker


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("talker")
    tw.write_tiny_talker(out, _thinker(out))
    return out


@pytest.fixture(scope="module")
def talker(folder: Path) -> Talker:
    return Talker.load(folder)


@pytest.fixture(scope="module")
def eos_after_a_code(tmp_path_factory: pytest.TempPathFactory) -> Talker:
    """A talker that says EOS whenever it may after a code, never after text:
    the text table leans one way on one axis, the codec's table the other,
    and the head's EOS row reads that axis."""
    out = tmp_path_factory.mktemp("eos-talker")
    cfg = tw.talker_config(_thinker(out), tiny=True)
    tw.write_config(out, cfg)
    tensors = tw.random(cfg)
    tensors[tw.PREFIX + "emb_text.weight"][:, 0] -= 10.0
    tensors[tw.PREFIX + "emb_code.0.weight"][:, 0] += 10.0
    tensors[tw.HEAD_DIRECTIONS][cfg.eos] = 0.0
    tensors[tw.HEAD_DIRECTIONS][cfg.eos, 0] = 1.0
    tensors[tw.HEAD_NORMS][cfg.eos] = 50.0
    save_file(tensors, str(out / tw.WEIGHTS_FILE))
    return Talker.load(out)


def _units(seed: int, sizes: Sequence[int], *, hidden: bool = True) -> list[Unit]:
    rng = np.random.default_rng(seed)
    units: list[Unit] = []
    for i, size in enumerate(sizes):
        ids = [int(x) for x in rng.integers(0, THINKER_VOCAB, size)]
        states = rng.standard_normal((size, THINKER_WIDTH)).astype(np.float32)
        units.append((ids, states if hidden else None, i == len(sizes) - 1))
    return units


def _speak(talker: Talker, turn: TalkerTurn, units: Sequence[Unit]) -> list[list[int]]:
    return [talker.speak(turn, ids, hidden, last=last) for ids, hidden, last in units]


def _recompute(talker: Talker, units: Sequence[Unit]) -> list[list[int]]:
    """Greedy codes of one turn, every step computed from the whole turn so
    far from position 0 with no cache."""
    eos = talker.config.eos
    fed: list[torch.Tensor] = []
    out: list[list[int]] = []
    with torch.inference_mode():
        for i, (ids, hidden, last) in enumerate(units):
            feed = talker.condition(ids, hidden)
            fewest = 0 if i == 0 or last else UNIT_STEPS
            codes: list[int] = []
            for step in range(UNIT_STEPS):
                fed.append(feed)
                sequence = torch.cat(fed)
                positions = torch.arange(sequence.shape[0])
                states = talker.backbone(
                    inputs_embeds=sequence[None], position_ids=positions[None], use_cache=False
                ).last_hidden_state
                code = sample_code(
                    states[0, -1] @ talker.head.T,
                    codes,
                    temperature=0.0,
                    eos=eos,
                    eos_allowed=step >= fewest,
                    generator=torch.Generator(),
                )
                if code == eos or step == UNIT_CODES:
                    break
                codes.append(code)
                feed = talker.emb_code(torch.tensor([code]))
            out.append(codes)
    return out


@pytest.mark.models
def test_a_turn_through_the_cache_says_what_a_recompute_says(talker: Talker) -> None:
    units = _units(1, [6, 4, 0, 5])
    # A unit without hidden states (stage0 gives none yet) mid-turn.
    units[1] = (units[1][0], None, False)
    turn = talker.turn(seed=0, temperature=0.0)
    cached = _speak(talker, turn, units)
    assert cached == _recompute(talker, units)
    assert [len(codes) for codes in cached[1:3]] == [UNIT_CODES, UNIT_CODES]
    assert turn.first and turn.position == 0 and turn.cache is None


@pytest.mark.models
def test_the_cache_runs_on_across_a_turns_units(talker: Talker) -> None:
    """Each unit adds its condition and every code it keeps (the 26th sample
    is never fed), and the next unit's codes depend on the ones before."""
    units = _units(2, [3, 7, 2])
    turn = talker.turn(seed=0, temperature=0.0)
    first = talker.speak(turn, *units[0][:2], last=False)
    assert turn.position == 3 + 1 + len(first)
    assert turn.cache is not None and turn.cache[0].shape[2] == turn.position
    second = talker.speak(turn, *units[1][:2], last=False)
    assert turn.position == 3 + 1 + len(first) + 7 + 1 + UNIT_CODES
    alone = talker.speak(talker.turn(seed=0, temperature=0.0), *units[1][:2], last=False)
    assert len(second) == UNIT_CODES and second != alone


@pytest.mark.models
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_mid_turn_units_are_25_codes_and_ends_stop_at_eos(
    eos_after_a_code: Talker, temperature: float
) -> None:
    """EOS is likelier than any code after every code here: the first and
    last units stop at it after their first code, mid-turn units are masked
    to 25 codes; EOS itself is never returned."""
    talker = eos_after_a_code
    turn = talker.turn(seed=5, temperature=temperature)
    spoken = _speak(talker, turn, _units(3, [5, 0, 8, 3]))
    assert [len(codes) for codes in spoken] == [1, UNIT_CODES, UNIT_CODES, 1]
    assert all(0 <= code < talker.config.eos for codes in spoken for code in codes)
    # The turn ended: the next unit is a new turn's first.
    assert turn.first
    assert len(talker.speak(turn, [1, 2], None, last=False)) == 1


@pytest.mark.models
def test_an_empty_first_unit_may_say_nothing_and_the_turn_runs_on(
    eos_after_a_code: Talker,
) -> None:
    talker = eos_after_a_code
    turn = talker.turn(seed=0, temperature=0.0)
    # Text leans away from EOS: the unit's first sample is a code, then EOS.
    assert len(talker.speak(turn, [], None, last=False)) == 1
    assert not turn.first
    assert len(talker.speak(turn, [], None, last=False)) == UNIT_CODES


@pytest.mark.models
def test_sampled_codes_are_the_codecs_and_depend_on_the_seed(talker: Talker) -> None:
    units = _units(4, [4, 6, 5])
    one = _speak(talker, talker.turn(seed=1), units)
    again = _speak(talker, talker.turn(seed=1), units)
    other = _speak(talker, talker.turn(seed=2), units)
    assert one == again and one != other
    assert [len(codes) for codes in one[1:2]] == [UNIT_CODES]
    assert all(0 <= code < talker.config.eos for codes in one for code in codes)


@pytest.mark.models
def test_interleaved_turns_say_what_each_says_alone(talker: Talker) -> None:
    a_units, b_units = _units(5, [3, 6, 4]), _units(6, [5, 2, 7])
    a_alone = _speak(talker, talker.turn(seed=11), a_units)
    b_alone = _speak(talker, talker.turn(seed=12), b_units)
    a_turn, b_turn = talker.turn(seed=11), talker.turn(seed=12)
    a_codes: list[list[int]] = []
    b_codes: list[list[int]] = []
    for (a_ids, a_hidden, a_last), (b_ids, b_hidden, b_last) in zip(a_units, b_units, strict=True):
        a_codes.append(talker.speak(a_turn, a_ids, a_hidden, last=a_last))
        b_codes.append(talker.speak(b_turn, b_ids, b_hidden, last=b_last))
    assert a_codes == a_alone and b_codes == b_alone
    assert a_alone != b_alone


@pytest.mark.models
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_batch_of_turns_at_different_places_says_what_each_says_alone(
    talker: Talker, eos_after_a_code: Talker, temperature: float
) -> None:
    """Rows of one batch sit at different positions (one far into its turn,
    one at its first unit), have conditions of different lengths, and stop
    at different steps (EOS on a first or last unit); each says, and keeps
    in its cache, what it says spoken alone, sampled or greedy."""
    for model in (talker, eos_after_a_code):
        turns = {"a": _units(21, [3, 6, 4, 2]), "b": _units(22, [5, 1]), "c": _units(23, [0, 7, 2])}
        seeds = {"a": 31, "b": 32, "c": 33}
        alone = {
            name: _speak(model, model.turn(seed=seeds[name], temperature=temperature), units)
            for name, units in turns.items()
        }
        state = {name: model.turn(seed=seeds[name], temperature=temperature) for name in turns}
        together: dict[str, list[list[int]]] = {name: [] for name in turns}
        # "b" starts a unit late, so rows are mid-turn beside first units.
        schedule = [["a"], ["a", "b", "c"], ["a", "b", "c"], ["a", "c"]]
        for names in schedule:
            units = [turns[name][len(together[name])] for name in names]
            batch = [TalkerUnit(state[n], *unit) for n, unit in zip(names, units, strict=True)]
            for name, codes in zip(names, model.speak_batch(batch), strict=True):
                together[name].append(codes)
        assert together == alone
        assert len({tuple(map(tuple, codes)) for codes in alone.values()}) == 3
        assert all(turn.first for turn in state.values())  # every turn ended
    with pytest.raises(ValueError, match="two units of one turn"):
        turn = talker.turn(seed=0)
        talker.speak_batch([TalkerUnit(turn, [1], None, False), TalkerUnit(turn, [2], None, False)])


@pytest.mark.models
def test_the_hidden_state_changes_the_codes(talker: Talker) -> None:
    ids, hidden, _ = _units(7, [6])[0]
    assert hidden is not None

    def codes(states: np.ndarray | None) -> list[int]:
        return talker.speak(talker.turn(seed=0, temperature=0.0), ids, states, last=False)

    # Opposite states, since a random projector's ReLU maps any two random
    # ones to much the same mean direction, too close to move greedy codes.
    given, opposite, none = codes(hidden), codes(-hidden), codes(None)
    assert len({tuple(given), tuple(opposite), tuple(none)}) == 3


@pytest.mark.models
def test_the_projected_hidden_state_is_l2_normalised(talker: Talker) -> None:
    """The condition is emb_text + the unit-length projection, then audio_bos;
    scaling the hidden state changes nothing (the random biases are zero)."""
    ids, hidden, _ = _units(8, [4])[0]
    assert hidden is not None
    with torch.inference_mode():
        condition = talker.condition(ids, hidden)
        text = talker.condition(ids, None)
        scaled = talker.condition(ids, hidden * 10.0)
    assert condition.shape == (5, talker.config.hidden_size)
    assert torch.equal(condition[-1], text[-1])
    norms = (condition[:-1] - text[:-1]).norm(dim=-1)
    assert torch.allclose(norms, torch.ones(4), atol=1e-5)
    assert torch.allclose(condition, scaled, atol=1e-5)
    audio_bos = talker.emb_text(torch.tensor([talker.config.audio_bos_token_id]))
    assert torch.equal(talker.condition([], None), audio_bos)


@pytest.mark.models
def test_bad_inputs_are_value_errors_and_leave_the_turn_alone(talker: Talker) -> None:
    turn = talker.turn(seed=0)
    width = THINKER_WIDTH
    for ids, hidden in [
        ([1, THINKER_VOCAB], None),
        ([-1], None),
        ([1, 2], np.zeros((3, width), np.float32)),
        ([1, 2], np.zeros((2, width + 1), np.float32)),
        ([], np.zeros((1, width), np.float32)),
    ]:
        with pytest.raises(ValueError):
            talker.speak(turn, ids, hidden, last=False)
    assert turn.first and turn.cache is None
    with pytest.raises(ValueError, match="negative"):
        talker.turn(seed=0, temperature=-1.0)


@pytest.mark.models
def test_the_weights_are_written_and_loaded_under_the_published_names(
    folder: Path, talker: Talker
) -> None:
    written = load_file(str(folder / tw.WEIGHTS_FILE))
    cfg = tw.read_config(json.loads((folder / "config.json").read_text()))
    assert cfg == talker.config
    assert {name: tuple(t.shape) for name, t in written.items()} == tw.shapes(cfg)
    width, codes = cfg.hidden_size, cfg.num_audio_tokens
    for name, shape in {
        "tts.emb_text.weight": (THINKER_VOCAB, width),
        "tts.emb_code.0.weight": (codes, width),
        "tts.head_code.0.parametrizations.weight.original0": (codes, 1),
        "tts.head_code.0.parametrizations.weight.original1": (codes, width),
        "tts.projector_semantic.linear1.weight": (width, THINKER_WIDTH),
        "tts.projector_semantic.linear2.bias": (width,),
        "tts.model.layers.1.self_attn.q_proj.weight": (width, width),
        "tts.model.layers.1.mlp.down_proj.weight": (width, cfg.intermediate_size),
        "tts.model.norm.weight": (width,),
    }.items():
        assert tuple(written[name].shape) == shape, name
    settings = json.loads((folder / "config.json").read_text())
    # The thinker's configuration is kept beside the talker's.
    assert settings["hidden_size"] == THINKER_WIDTH
    assert settings[tw.CONFIG_KEY]["num_audio_tokens"] == 6562


@pytest.mark.models
def test_the_head_folds_its_weight_norm(folder: Path) -> None:
    cfg = tw.read_config(json.loads((folder / "config.json").read_text()))
    tensors = tw.random(cfg)
    tensors[tw.HEAD_NORMS] = torch.rand(cfg.num_audio_tokens, 1) + 0.5
    head = Talker(cfg, tensors).head
    expected = torch._weight_norm(tensors[tw.HEAD_DIRECTIONS], tensors[tw.HEAD_NORMS], 0)
    assert torch.allclose(head, expected, atol=1e-6)


@pytest.mark.models
def test_a_checkpoint_split_over_files_with_unused_weights_loads(
    folder: Path, talker: Talker, tmp_path: Path
) -> None:
    """As published: the talker's tensors among the thinker's, in several
    files, beside ones the duplex talker never reads."""
    shutil.copy(folder / "config.json", tmp_path / "config.json")
    tensors = load_file(str(folder / tw.WEIGHTS_FILE))
    names = sorted(tensors)
    half = len(names) // 2
    width = talker.config.hidden_size
    save_file(
        {name: tensors[name] for name in names[:half]}
        | {"llm.model.norm.weight": torch.ones(THINKER_WIDTH)},
        str(tmp_path / "model-00001-of-00002.safetensors"),
    )
    save_file(
        {name: tensors[name] for name in names[half:]}
        | {
            "tts.projector_spk.linear1.weight": torch.zeros(width, THINKER_WIDTH),
            "tts.model.embed_tokens.weight": torch.zeros(7, width),
        },
        str(tmp_path / "model-00002-of-00002.safetensors"),
    )
    units = _units(9, [4, 3])
    loaded = Talker.load(tmp_path)
    assert _speak(loaded, loaded.turn(seed=3), units) == _speak(talker, talker.turn(seed=3), units)


@pytest.mark.models
def test_a_missing_or_misshapen_weight_is_a_typed_error(folder: Path, tmp_path: Path) -> None:
    shutil.copy(folder / "config.json", tmp_path / "config.json")
    tensors = load_file(str(folder / tw.WEIGHTS_FILE))
    missing = dict(tensors)
    del missing[tw.HEAD_NORMS]
    save_file(missing, str(tmp_path / tw.WEIGHTS_FILE))
    with pytest.raises(MissingAssetError, match="original0"):
        Talker.load(tmp_path)
    misshapen = tensors | {"tts.emb_text.weight": torch.zeros(THINKER_VOCAB - 1, 32)}
    save_file(misshapen, str(tmp_path / tw.WEIGHTS_FILE))
    with pytest.raises(ValueError, match="emb_text"):
        Talker.load(tmp_path)
    settings = json.loads((tmp_path / "config.json").read_text())
    del settings[tw.CONFIG_KEY]
    (tmp_path / "config.json").write_text(json.dumps(settings))
    with pytest.raises(MissingAssetError, match="tts_config"):
        Talker.load(tmp_path)


# --- model-free ------------------------------------------------------------


def test_the_configuration_has_the_published_defaults() -> None:
    cfg = tw.TalkerConfig.from_dict({"llm_dim": 4096, "streaming": True, "num_mel_bins": 100})
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (768, 3072, 20)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (12, 12)
    assert (cfg.max_position_embeddings, cfg.num_text_tokens) == (4096, 152_064)
    assert (cfg.num_audio_tokens, cfg.eos) == (6562, 6561)
    assert cfg.normalize_projected_hidden
    assert tw.TalkerConfig.from_dict(cfg.to_dict()) == cfg
    for bad in ({"num_vq": 2}, {"audio_bos_token_id": 152_064}, {"num_attention_heads": 7}):
        with pytest.raises(ValueError):
            tw.TalkerConfig.from_dict(bad)


def _pick(logits: list[float], recent: list[int], **settings: bool) -> int:
    return sample_code(
        torch.tensor(logits),
        recent,
        temperature=0.0,
        eos=len(logits) - 1,
        eos_allowed=settings.get("eos_allowed", True),
        generator=torch.Generator(),
    )


def test_the_repetition_penalty_is_the_official_one() -> None:
    """1.05 per occurrence among the last 16 codes: divides a positive logit,
    multiplies a negative one."""
    assert _pick([1.0, 1.04, -9.0], []) == 1
    assert _pick([1.0, 1.04, -9.0], [1]) == 0
    assert _pick([1.10, 1.0, -9.0], [0]) == 0
    assert _pick([1.10, 1.0, -9.0], [0, 0]) == 1
    assert _pick([-1.0, -1.02, -9.0], [0]) == 1
    assert _pick([1.0, 1.04, -9.0], [1] + [2] * 16) == 1
    assert _pick([1.0, 1.04, 5.0], [], eos_allowed=False) == 1
    assert _pick([1.0, 1.04, 5.0], []) == 2


def test_sampling_follows_the_turns_generator_alone() -> None:
    logits = torch.zeros(6562)

    def draws(seed: int) -> list[int]:
        generator = torch.Generator().manual_seed(seed)
        return [
            sample_code(
                logits, [], temperature=0.8, eos=6561, eos_allowed=False, generator=generator
            )
            for _ in range(8)
        ]

    torch.manual_seed(0)
    first = draws(1)
    torch.manual_seed(99)
    assert draws(1) == first != draws(2)
    assert 6561 not in first
