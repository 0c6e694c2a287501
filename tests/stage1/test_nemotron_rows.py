"""Nemotron VoiceChat's speaking half over a batch of rows (nemotron/lockstep.py
SpeakingRows: EAR-TTS, its shared cache, the streamed codec): each row
speaks exactly what NeMo speaks for its session alone, whoever shares the
batch, joins, leaves or sits a step out."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from antiphon.stage1.backends.nemotron.lockstep import SpeakingRows
from tests.stage1.nemotron_reference import Codes, TinyNemotron

# The codec's streamed frames lag its whole-sequence decode by this many
# samples (its inverse STFT's half window, 2 hops of 4 at `random:tiny`'s shape).
STREAM_LAG = 8
# Streamed against whole, past the first frame (whose left context differs:
# zeros streamed, the signal's edge whole): equal to float32 rounding, far
# below a PCM16 step (3e-5). A row that took another's state, or lost its
# own, would differ by the signal itself (its peak here is some 5e-3).
AUDIO_ATOL = 1e-6


@dataclass
class Session:
    tokens: list[int]
    codes: list[Codes] = field(default_factory=list)
    samples: list[np.ndarray] = field(default_factory=list)

    @property
    def spoken(self) -> int:
        return len(self.codes)


class Runner:
    """Steps rows as the lockstep does: `schedule[step]` gives rows to a new
    session (or frees them); a held row sits out the steps its pattern says,
    the others speak their session's next token."""

    def __init__(self, rows: SpeakingRows, slots: int) -> None:
        self.rows = rows
        self.holders: list[Session | None] = [None] * slots
        self.step = 0

    def run(self, steps: int, schedule: dict[int, dict[int, Session | None]]) -> None:
        import torch

        for _ in range(steps):
            afresh = [holder is None for holder in self.holders]
            for slot, session in schedule.get(self.step, {}).items():
                self.holders[slot] = session
                afresh[slot] = True
            stepping = [
                s is not None and s.spoken < len(s.tokens) and (self.step + 2 * slot) % 5 != 3
                for slot, s in enumerate(self.holders)
            ]
            tokens = [
                s.tokens[s.spoken] if go and s is not None else 0
                for go, s in zip(stepping, self.holders, strict=True)
            ]
            codes, samples = self.rows.step(
                torch.tensor(tokens), torch.tensor(stepping), torch.tensor(afresh)
            )
            for slot, session in enumerate(self.holders):
                if stepping[slot] and session is not None:
                    session.codes.append(codes[slot].numpy().copy())
                    session.samples.append(samples[slot].numpy().copy())
            self.step += 1


def sessions(tiny: TinyNemotron, count: int, frames: int) -> Iterator[Session]:
    for seed in range(count):
        yield Session(tiny.tokens(seed, frames))


@pytest.mark.models
def test_each_row_speaks_exactly_what_nemo_speaks_for_its_session_alone(
    tiny_nemotron: TinyNemotron,
) -> None:
    """Three rows, five sessions: two start together, one joins at step 4,
    one leaves at 10 and its row is taken at 13, another's at 20; every
    row sits some steps out. Each session's codes equal NeMo's for its tokens
    alone (offline_inference's TTS loop, batch 1), and its streamed audio
    NeMo's whole-sequence decode of them."""
    a, b, c, d, e = sessions(tiny_nemotron, 5, 24)
    rows = SpeakingRows(tiny_nemotron.tts, tiny_nemotron.prompt, 3)
    schedule: dict[int, dict[int, Session | None]] = {
        0: {0: a, 1: b},
        4: {2: c},
        10: {1: None},
        13: {1: d},
        19: {2: None},
        20: {2: e},
    }
    Runner(rows, 3).run(52, schedule)
    b.tokens, c.tokens = b.tokens[: b.spoken], c.tokens[: c.spoken]  # they left mid-way
    for name, session in zip("abcde", (a, b, c, d, e), strict=True):
        assert session.spoken == len(session.tokens) > 5, name
        want = tiny_nemotron.codes(session.tokens)
        np.testing.assert_array_equal(np.stack(session.codes), want, err_msg=name)
        streamed = np.concatenate(session.samples)
        whole = tiny_nemotron.whole(want)
        frame = len(streamed) // session.spoken
        np.testing.assert_allclose(
            streamed[frame + STREAM_LAG :],
            whole[frame : len(streamed) - STREAM_LAG],
            rtol=0,
            atol=AUDIO_ATOL,
            err_msg=name,
        )
    # Different tokens, different speech: the comparisons above tell sessions apart.
    assert not np.array_equal(np.stack(a.codes)[1:10], np.stack(d.codes)[1:10])
    assert (
        np.abs(np.concatenate(a.samples)[:20000] - np.concatenate(d.samples)[:20000]).max() > 1e-3
    )


@pytest.mark.models
def test_a_session_starts_with_nemos_silent_first_frame_then_speaks_its_tokens(
    tiny_nemotron: TinyNemotron,
) -> None:
    """NeMo does not step the TTS on a session's first frame (its codes stay
    zero); the second frame is the first step, from the speaker prompt."""
    (session,) = sessions(tiny_nemotron, 1, 3)
    rows = SpeakingRows(tiny_nemotron.tts, tiny_nemotron.prompt, 1)
    Runner(rows, 1).run(5, {0: {0: session}})
    assert session.spoken == 3
    assert not session.codes[0].any()
    assert session.codes[1].any()


@pytest.fixture
def short_window(tiny_nemotron: TinyNemotron) -> Iterator[int]:
    """The backbone's sliding window cut to 12 frames (the tiny model's one
    layer slides; its own window is 4,096), for this test only."""
    config = tiny_nemotron.tts.tts_model.backbone.config
    saved = config.sliding_window
    config.sliding_window = 12
    try:
        yield 12
    finally:
        config.sliding_window = saved


@pytest.mark.models
def test_rows_stay_exact_past_the_sliding_window_and_drop_the_columns_nobody_sees(
    tiny_nemotron: TinyNemotron, short_window: int
) -> None:
    """Past the window a row's keys slide by *its* positions, wherever its
    columns are; columns out of every row's window are dropped, so the
    shared cache stays some window long rather than growing with the run."""
    long, short, late = sessions(tiny_nemotron, 3, 110)
    short.tokens = short.tokens[:30]
    rows = SpeakingRows(tiny_nemotron.tts, tiny_nemotron.prompt, 2)
    schedule: dict[int, dict[int, Session | None]] = {0: {0: long, 1: short}, 40: {1: late}}
    runner = Runner(rows, 2)
    lengths = []
    for _ in range(7):
        runner.run(20, schedule)
        lengths.append(rows.tts.columns)
    late.tokens = late.tokens[: late.spoken]
    for name, session in (("long", long), ("short", short), ("late", late)):
        assert session.spoken == len(session.tokens) > short_window, name
        want = tiny_nemotron.codes(session.tokens)
        np.testing.assert_array_equal(np.stack(session.codes), want, err_msg=name)
    # 140 steps, yet the cache never held more than the prompt, the rows'
    # windows and the 64 dead columns that set a compaction off.
    prompt = tiny_nemotron.prompt.length
    assert max(lengths) < prompt + 2 * short_window + 64 + 10 < 140, lengths
    assert min(lengths[3:]) < lengths[2], lengths


@pytest.fixture
def eager_attention(tiny_nemotron: TinyNemotron) -> Iterator[None]:
    """The backbone on transformers' eager attention (additive float masks)
    instead of SDPA (boolean ones), for this test only."""
    config = tiny_nemotron.tts.tts_model.backbone.config
    saved = config._attn_implementation
    config._attn_implementation = "eager"
    try:
        yield
    finally:
        config._attn_implementation = saved


@pytest.mark.models
def test_rows_are_exact_on_eager_attention_too(
    tiny_nemotron: TinyNemotron, eager_attention: None
) -> None:
    """The rows' masks as eager attention adds them (0 or the dtype's lowest)
    shut out what SDPA's boolean ones do."""
    first, second = sessions(tiny_nemotron, 2, 16)
    rows = SpeakingRows(tiny_nemotron.tts, tiny_nemotron.prompt, 2)
    Runner(rows, 2).run(30, {0: {0: first}, 5: {1: second}})
    for session in (first, second):
        assert session.spoken == len(session.tokens)
        want = tiny_nemotron.codes(session.tokens)
        np.testing.assert_array_equal(np.stack(session.codes), want)
