"""The `antiphon` command as a user runs it: the installed console script, in
its own process, against a running stack."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from stack import LocalStack, free_port

from antiphon.client import audio
from antiphon.common.assets import default_cache_dir
from antiphon.common.audio import resample_pcm16
from antiphon.stage0.assets import locate
from antiphon.stage0.backends.cascade.asr.asr import WhisperAsr
from tests.support.speech import Voice, spoken

pytestmark = pytest.mark.stack
ANTIPHON = str(Path(sys.executable).with_name("antiphon"))


def antiphon(*args: str, port: int, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    url = f"ws://127.0.0.1:{port}/v1/realtime?duplex=1"
    return subprocess.run(
        [ANTIPHON, *args, "--url", url], capture_output=True, text=True, timeout=timeout
    )


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower()))


@pytest.fixture(scope="module")
def whisper() -> WhisperAsr:
    return WhisperAsr(locate(default_cache_dir()).whisper_dir, threads=1)


def heard(whisper: WhisperAsr, path: Path) -> str:
    pcm = audio.read_wav(path, 24000)
    return whisper.transcribe(resample_pcm16(pcm, 24000, 16000))


def test_events_prints_the_wire_log_of_a_turn_both_ways(synthetic_stack: LocalStack) -> None:
    run = antiphon("events", "--text", "Hello there", port=synthetic_stack.ports.gateway)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    first = [line.split()[:2] for line in lines[:3]]
    assert first == [[">", "session.update"], ["<", "session.created"], ["<", "session.updated"]]
    assert any(line.startswith("> conversation.item.create") for line in lines)
    assert any(line.startswith("< response.done") for line in lines)
    # Audio is shown by its size, never as base64.
    deltas = [line for line in lines if line.startswith("< response.output_audio.delta")]
    assert deltas and all(re.search(r'"delta": "<\d+ bytes>"', line) for line in deltas)


def test_a_server_that_is_down_or_refuses_is_a_clear_error(auth_stack: LocalStack) -> None:
    down = antiphon("ask", "hi", port=free_port(), timeout=60)
    assert down.returncode == 2
    assert "cannot reach" in down.stderr and "make run" in down.stderr
    refused = antiphon("ask", "hi", port=auth_stack.ports.gateway, timeout=60)
    assert refused.returncode == 3
    assert "401" in refused.stderr and "--api-key" in refused.stderr


@pytest.mark.models
def test_ask_writes_a_spoken_answer_that_says_what_was_printed(
    model_stack: LocalStack, whisper: WhisperAsr, tmp_path: Path
) -> None:
    out = tmp_path / "a.wav"
    run = antiphon(
        "ask", "What is the capital of France?", "--out", str(out), port=model_stack.ports.gateway
    )
    assert run.returncode == 0, run.stderr
    printed = words(run.stdout)
    assert "paris" in printed
    # The answer is heard, or every printed word but one is. Under load the
    # underrun guard speaks the words written so far (playout.py), and a last
    # word voiced alone is what Whisper base mishears: "Paris." alone came
    # back as "heirs" or "Eris" in two of three tries (and "is" as "'s"). A
    # whole sentence it hears as "Francis Paris".
    said = words(heard(whisper, out).replace("'s", " is"))
    assert "paris" in said or len(printed - said) <= 1, (run.stdout, said)


@pytest.mark.models
@pytest.mark.parametrize("voice", ["piper", "espeak"])
def test_talk_holds_a_spoken_turn_from_a_file(
    model_stack: LocalStack, whisper: WhisperAsr, tmp_path: Path, voice: Voice
) -> None:
    question, out = tmp_path / "q.wav", tmp_path / "reply.wav"
    # 16 kHz on disk: the client converts to the session's rate.
    audio.write_wav(question, spoken("What is the capital of France?", 16000, voice), 16000)
    run = antiphon("talk", "--in", str(question), "--out", str(out), port=model_stack.ports.gateway)
    assert run.returncode == 0, run.stderr
    you, assistant = run.stdout.splitlines()[:2]
    assert {"capital", "france"} <= words(you), run.stdout
    assert assistant.startswith("assistant: ") and "paris" in words(assistant)
    assert words(heard(whisper, out)) & words(assistant), run.stdout
