"""Whisper ASR on real (synthesised) speech."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from antiphon.stage0.assets import Stage0Assets
from antiphon.stage0.backends.cascade.asr.asr import WhisperAsr


@pytest.fixture(scope="module")
def asr(assets: Stage0Assets) -> WhisperAsr:
    return WhisperAsr(assets.whisper_dir, threads=1)


@pytest.mark.models
def test_transcribes_what_was_said(asr: WhisperAsr, say: Callable[[str], bytes]) -> None:
    text = asr.transcribe(say("The quick brown fox jumps over the lazy dog."))
    words = set(re.findall(r"[a-z]+", text.lower()))
    assert {"quick", "brown", "fox", "lazy", "dog"} <= words
    assert text == text.strip()


@pytest.mark.models
def test_silence_and_empty_audio_give_empty_text(asr: WhisperAsr) -> None:
    assert asr.transcribe(b"") == ""
    assert asr.transcribe(bytes(16_000 * 2)) == ""
