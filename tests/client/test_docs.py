"""Every Python example in docs/client.md, run as a user would paste it, against a live stack."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from stack import LocalStack

from antiphon.client import audio
from tests.support.speech import spoken

pytestmark = [pytest.mark.stack, pytest.mark.models]
DOC = Path(__file__).parents[2] / "docs" / "client.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
# What each example prints when it works, in the order the page gives them.
PRINTS = [
    ["completed"],
    ["you:", "assistant:", "end of speech -> first audio:", "playback stalls:"],
    ["refused: input_audio_buffer_empty", "\ncancelled\n"],
]


def test_the_page_has_the_examples_this_test_expects() -> None:
    assert len(EXAMPLES) == len(PRINTS)


@pytest.mark.parametrize("index", range(len(PRINTS)))
def test_an_example_runs_and_prints_what_the_page_says(
    slow_synthetic_stack: LocalStack, tmp_path: Path, index: int
) -> None:
    audio.write_wav(tmp_path / "question.wav", spoken("What is the capital of France?"))
    url = f"ws://127.0.0.1:{slow_synthetic_stack.ports.gateway}/v1/realtime?duplex=1"
    run = subprocess.run(
        [sys.executable, "-c", EXAMPLES[index]],
        cwd=tmp_path,
        env={**os.environ, "ANTIPHON_URL": url},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr
    for expected in PRINTS[index]:
        assert expected in run.stdout, run.stdout
