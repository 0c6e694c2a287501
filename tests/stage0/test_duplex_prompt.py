"""PersonaPlex's prompt on the lockstep: a row opened with one steps through
it, forced, beside rows that are not disturbed, reports its first frame only
after it, and is then token for token moshi's own loop given the same forced
frames through the same hooks; the forced tokens land in the LM's streams;
voice clips are found by name, read at any rate and encoded once."""

from __future__ import annotations

import logging
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry

from antiphon.common import moshi_checkpoint
from antiphon.common.moshi_checkpoint import FRAME_MS
from antiphon.stage0.backends.moshi.lockstep import Lockstep
from antiphon.stage0.backends.moshi.prompt import (
    SILENCE_FRAMES,
    Prompter,
    Streams,
    align,
    prompt_format,
    read_voice,
)
from antiphon.stage0.backends.moshi.rows import FRAME_BYTES, Row
from antiphon.stage0.backends.moshi.session import DuplexSession
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.v1 import stage_pb2 as pb
from tests.stage0.duplex_reference import reference, tiny_lockstep, tiny_parts, voice

pytestmark = pytest.mark.models

Tokens = list[tuple[int, list[int]]]
INSTRUCTIONS = "be brief"


def tiny_prompter(voice_dir: Path | None = None) -> Prompter:
    lm, _ = tiny_parts(torch.float32)
    return Prompter.of_checkpoint(moshi_checkpoint.resolve("random:tiny"), lm, "cpu", voice_dir)


def spelled(lockstep: Lockstep) -> None:
    lockstep.model.text_of = lambda token: f"#{token}"


def collector(
    into: list[tuple[int, pb.ModelFrame]], step: list[int]
) -> Callable[[pb.Stage0Event], None]:
    def emit(event: pb.Stage0Event) -> None:
        into.append((step[0], event.frame))

    return emit


def tokens(frames: list[tuple[int, pb.ModelFrame]]) -> Tokens:
    return [(int(f.text.removeprefix("#")), list(f.codes)) for _, f in frames]


def test_a_prompted_row_speaks_after_its_prompt_and_as_the_reference_does() -> None:
    prompter = tiny_prompter()
    registry = CollectorRegistry()
    lockstep = tiny_lockstep(3, torch.float32, prompter=prompter, metrics=Stage0Metrics(registry))
    spelled(lockstep)
    prefill = lockstep.model.prefill(INSTRUCTIONS, "")
    assert len(prefill) == len(f"<system> {INSTRUCTIONS} <system>") + 2 * SILENCE_FRAMES
    steps = 60
    # (input kind, first step, prompt) per session; all leave at `steps`.
    plan = {"plain": (1, 0, False), "prompted": (2, 3, True), "late": (3, 10, False)}
    frames: dict[str, list[tuple[int, pb.ModelFrame]]] = {name: [] for name in plan}
    now = [0]
    rows: dict[str, Row] = {}
    for step in range(steps):
        now[0] = step
        for name, (kind, first, prompted) in plan.items():
            if step == first:
                rows[name] = lockstep.open(
                    collector(frames[name], now), name, prefill if prompted else ()
                )
                lockstep.hear(rows[name], voice(kind, steps - first))
        lockstep.step()
    # Its first frame comes the step after its prompt's last came out.
    first_live = 3 + len(prefill) + lockstep.model.lm_gen.max_delay
    assert frames["prompted"][0][0] == first_live
    assert [f.index for _, f in frames["prompted"]] == list(range(steps - first_live))
    got = {name: tokens(f) for name, f in frames.items()}
    for name, (kind, first, prompted) in plan.items():
        heard = voice(kind, steps - first)
        if prompted:
            # What it said during the prompt was not heard: it goes on from there.
            heard = heard[len(prefill) * FRAME_BYTES :]
        want = reference(heard, steps - first, torch.float32, prefill if prompted else ())
        assert got[name] == want, name
    dropped = registry.get_sample_value("antiphon_stage0_duplex_dropped_input_ms_total")
    assert dropped == len(prefill) * FRAME_MS
    # The prompt changed what the model says to the same input.
    assert (
        got["prompted"]
        != reference(voice(2, steps - 3), steps - 3, torch.float32)[: len(got["prompted"])]
    )


def test_the_forced_frames_land_in_the_models_streams() -> None:
    """Each prefill step's raw output is the prompt's previous frame, exactly:
    the text and all eight agent codebooks the prompt put there."""
    prompter = tiny_prompter()
    lockstep = tiny_lockstep(2, torch.float32, prompter=prompter)
    lockstep.open(lambda e: None)  # a neighbour stepping on its own
    streams = prompter.streams(INSTRUCTIONS, "")
    row = lockstep.open(lambda e: pytest.fail("a prompt frame was reported"), "p", align(streams))
    for step in range(len(streams) + 1):
        batch = lockstep.gather()
        out = lockstep.compute(batch)
        lockstep.deliver(batch, out, late=False)
        if step >= 1:
            text, *codes = out[row.index]
            if step < len(streams):
                assert (text, tuple(codes)) == (streams.text[step - 1], streams.agent[step - 1])
            # The last frame's text and codebook 0 are the prompt's too.
            assert text == streams.text[step - 1] and codes[0] == streams.agent[step - 1][0]
    assert not row.prefill and row.discard == 0


def test_alignment_puts_codebooks_1_to_7_one_step_late() -> None:
    streams = Streams(
        user=[(9,) * 8, (8,) * 8],
        text=[5, 6],
        agent=[(1, 1, 1, 1, 1, 1, 1, 1), (2, 2, 2, 2, 2, 2, 2, 2)],
    )
    first, second = align(streams)
    assert first.text == 5 and first.agent == (1,) * 8 and first.user == (9,) * 8
    assert second.text == 6 and second.agent == (2, 1, 1, 1, 1, 1, 1, 1)


def write_wav(path: Path, rate: int, channels: int, seconds: float) -> None:
    t = np.arange(int(rate * seconds)) / rate
    tone = np.sin(2 * np.pi * 180 * t) * np.sin(2 * np.pi * 2 * t) * 0.3
    samples = np.stack([tone, np.roll(tone, 7)][:channels], axis=1)
    with wave.open(str(path), "wb") as clip:
        clip.setnchannels(channels)
        clip.setsampwidth(2)
        clip.setframerate(rate)
        clip.writeframes((samples * 32767).astype("<i2").tobytes())


def test_a_voice_clip_is_read_at_any_rate_encoded_once_and_prefilled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_wav(tmp_path / "anna.wav", 16_000, 2, 1.0)
    pcm = read_voice(tmp_path / "anna.wav")
    assert pcm.dtype == np.float32 and pcm.size == 24_000
    assert abs(20 * np.log10(np.sqrt(np.mean(pcm.astype(np.float64) ** 2))) + 24) < 0.5
    prompter = tiny_prompter(tmp_path)
    assert prompter.preload() == ["anna"]
    codes = prompter.voice("anna")
    assert codes is not None and len(codes) == 13  # 1 s at 12.5 Hz, rounded up
    assert all(0 <= c < 32 for frame in codes for c in frame)
    assert prompter.voice("anna") is codes  # encoded once
    voiced = prompter.streams(INSTRUCTIONS, "anna")
    bare = prompter.streams(INSTRUCTIONS, "")
    assert len(voiced) == len(bare) + len(codes)
    assert voiced.agent[: len(codes)] == codes
    assert voiced.text[: len(codes)] == [prompter.text_pad] * len(codes)
    assert set(voiced.user) == {prompter.sine}
    with caplog.at_level(logging.WARNING, logger="antiphon.stage0.backends.moshi.prompt"):
        for name in ("alloy", "alloy", "../anna", "anna/"):
            assert prompter.streams(INSTRUCTIONS, name) == bare
    assert [r.message for r in caplog.records].count("no voice clip: no voice prompt") == 3


def test_the_session_passes_its_instructions_and_voice_and_moshi_gets_no_prompt() -> None:
    prompted = tiny_lockstep(1, torch.float32, prompter=tiny_prompter())
    session = DuplexSession(prompted, lambda e: None)
    session.handle(pb.Stage0Request(open=pb.Stage0Open(session_id="s", instructions=INSTRUCTIONS)))
    assert session.row is not None
    assert list(session.row.prefill) == prompted.model.prefill(INSTRUCTIONS, "")
    plain = tiny_lockstep(1, torch.float32)
    session = DuplexSession(plain, lambda e: None)
    session.handle(pb.Stage0Request(open=pb.Stage0Open(session_id="s", instructions=INSTRUCTIONS)))
    assert session.row is not None and not session.row.prefill and session.row.discard == 0


def test_auto_prompts_only_personaplex_shaped_weights() -> None:
    tiny = moshi_checkpoint.resolve("random:tiny")
    assert prompt_format("auto", tiny) == "none"
    assert prompt_format("personaplex", tiny) == "personaplex"
    assert prompt_format("none", tiny) == "none"


def test_a_worker_set_to_personaplex_loads_its_voices_at_start(tmp_path: Path) -> None:
    from antiphon.stage0.backends.moshi.model import DuplexModel
    from antiphon.stage0.settings import Stage0Settings

    write_wav(tmp_path / "bob.wav", 24_000, 1, 0.4)
    settings = Stage0Settings(
        backend="moshi",
        duplex_checkpoint="random:tiny",
        duplex_prompt_format="personaplex",
        duplex_voice_dir=tmp_path,
    )
    model = DuplexModel.load(settings)
    assert model.prompter is not None and model.prompter.voice_dir == tmp_path
    assert len(model.prefill("", "bob")) == 5 + len("<system> <system>") + 2 * SILENCE_FRAMES
    plain = DuplexModel.load(settings.model_copy(update={"duplex_prompt_format": "auto"}))
    assert plain.prompter is None and plain.prefill(INSTRUCTIONS, "bob") == []


def test_a_new_persona_starts_the_row_afresh_with_its_prompt_and_the_same_one_does_not() -> None:
    lockstep = tiny_lockstep(1, torch.float32, prompter=tiny_prompter())
    session = DuplexSession(lockstep, lambda e: None)
    session.handle(pb.Stage0Request(open=pb.Stage0Open(session_id="s", instructions=INSTRUCTIONS)))
    row = session.row
    assert row is not None
    for _ in range(len(row.prefill) + 5):
        lockstep.step()
    assert not row.prefill
    # The same persona again (a session.update of something else): nothing happens.
    session.handle(
        pb.Stage0Request(configure=pb.Stage0Open(session_id="s", instructions=INSTRUCTIONS))
    )
    assert not row.prefill and row.discard == 0
    session.handle(
        pb.Stage0Request(configure=pb.Stage0Open(session_id="s", instructions="be a pirate"))
    )
    assert list(row.prefill) == lockstep.model.prefill("be a pirate", "")
    assert row.discard == len(row.prefill) + lockstep.model.lm_gen.max_delay
    assert session.row is row  # the same row, reset at its next step
