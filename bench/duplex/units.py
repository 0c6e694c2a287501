"""Sessions of a model that decides once a unit (`minicpmo`: a second of 16 kHz audio),
and what a level's window says of them (of its voice: unit_voice.py).

A session streams the speech in appends of `APPEND_S` on deadlines, as a browser's
microphone does; every `unit_s / APPEND_S`-th append closes a unit (the worker cuts
its units at whole seconds of audio received), and with `--frames` that append
carries a small JPEG camera frame, the unit's. A unit's latency is the client's
time from sending its closing append to receiving the ModelFrame of the same
index. A unit the worker dropped (its jitter buffer full) has no frame, and the
frames after it carry later units' indexes: the `late` flag and the worker's
dropped-input counter say so, and such a level is not real time.
"""

from __future__ import annotations

import asyncio
import io
import math
from collections.abc import Sequence
from typing import Any

import grpc
import numpy as np

from antiphon.v1 import stage_pb2 as pb
from bench.duplex.clients import Schedule, SessionRecord, Stream, hang_up
from bench.duplex.unit_voice import UnitVoice
from bench.duplex.workers import OUTPUT_RATE
from bench.lib.machine import now
from bench.lib.stats import pct

APPEND_S = 0.200
# Answers to the window's last units may come after it ends: the clients wait this long.
GRACE_S = 3.0
# A frame the size of a phone camera's preview, one slice for the model.
FRAME_SIZE = (320, 240)


def camera_frame(width: int = FRAME_SIZE[0], height: int = FRAME_SIZE[1]) -> bytes:
    """A JPEG of a gradient with some noise (a flat one would compress to nothing)."""
    from PIL import Image

    x = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None, None]
    rgb = np.concatenate([x + 0 * y, y + 0 * x, (x + y) / 2], axis=2)
    rgb += np.random.default_rng(0).normal(0, 12, rgb.shape)
    out = io.BytesIO()
    Image.fromarray(rgb.clip(0, 255).astype(np.uint8)).save(out, format="JPEG", quality=80)
    return out.getvalue()


async def run_unit_session(
    stubs: tuple[Any, Any | None],
    rec: SessionRecord,
    sched: Schedule,
    pcm: np.ndarray,
    rate: int,
    phase: float,
    *,
    unit_s: float,
    frame: bytes | None = None,
) -> None:
    """One session: paced appends into stage0's Bind, its units' frames back, and
    with a stage1 (the voice) each frame on to its Bind and the audio back
    (unit_voice.py)."""
    up, down = Stream(), Stream()
    call = stubs[0].Bind(up.requests())
    calls = [call]
    sid = f"bench-{rec.index}"
    up.queue.put_nowait(
        pb.Stage0Request(open=pb.Stage0Open(session_id=sid, lane=pb.LANE_NATIVE, skip_vad=True))
    )
    if stubs[1] is not None:
        calls.append(stubs[1].Bind(down.requests()))
        down.queue.put_nowait(
            pb.Stage1Request(open=pb.Stage1Open(session_id=sid, sample_rate_hz=OUTPUT_RATE))
        )
    t_open = now()
    await asyncio.gather(*(c.initial_metadata() for c in calls))
    rec.opened_s = round(now() - t_open, 3)
    per_unit = round(unit_s / APPEND_S)
    # Unit index -> when the append that closed it was sent; and when its frame came.
    closed: dict[int, float] = {}
    answered: dict[int, float] = {}
    voice = UnitVoice(sid, down.queue, rec, sched, closed) if len(calls) > 1 else None

    async def send_audio() -> None:
        samples = int(APPEND_S * rate)
        offset = (rec.index * 7919 * samples) % len(pcm)
        k = max(0, math.ceil((now() - sched.start - phase) / APPEND_S))
        sent = 0
        while True:
            deadline = sched.start + phase + k * APPEND_S
            if deadline >= sched.end:
                return
            await asyncio.sleep(max(0.0, deadline - now()))
            if deadline >= sched.window_start:
                rec.send_lag_ms.append((now() - deadline) * 1000)
            at = (offset + k * samples) % (len(pcm) - samples)
            audio = pb.Stage0Audio(epoch=0, pcm16=pcm[at : at + samples].tobytes())
            sent += 1
            closes = sent % per_unit == 0
            if closes and frame is not None:
                audio.video_frames.append(frame)
            up.queue.put_nowait(pb.Stage0Request(audio=audio))
            if closes:
                closed[sent // per_unit - 1] = now()
            k += 1

    async def read_frames() -> None:
        async for ev in call:
            kind = ev.WhichOneof("kind")
            if kind == "frame":
                t = now()
                answered.setdefault(ev.frame.index, t)
                rec.frame_times.append(t)
                if ev.frame.decision == pb.DECISION_SPEAK:
                    rec.units_spoken += 1
                    rec.text_tokens += len(ev.frame.tokens)
                if ev.frame.late and t >= sched.window_start:
                    rec.late_flagged += 1
                if voice is not None:
                    voice.frame(ev.frame, t)
            elif kind == "error":
                rec.error = f"stage0 {ev.error.code}: {ev.error.message}"[:200]

    async def read_audio() -> None:
        if voice is None:
            return
        try:
            async for ev in calls[1]:
                voice.event(ev, now())
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:  # not the clients' own end
                rec.voice_error_events += 1
                rec.voice_error = rec.voice_error or f"stage1 {exc.code().name}: {exc.details()}"

    readers = [asyncio.create_task(read_frames()), asyncio.create_task(read_audio())]
    try:
        await send_audio()
        await asyncio.sleep(max(0.0, sched.end + GRACE_S - now()))
    finally:
        await hang_up([up, down], calls, readers)
    for unit, sent_at in closed.items():
        if sched.window_start <= sent_at < sched.end:
            rec.units_closed += 1
            if unit in answered:
                rec.units_answered += 1
                rec.unit_latency_ms.append(round((answered[unit] - sent_at) * 1000, 2))


def summarize_units(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The sessions' side of a level: unit latency, units answered, flags, errors."""
    lat = [x for r in records for x in r["unit_latency_ms"]]
    lag = [x for r in records for x in r["send_lag_ms"]]
    errors: dict[str, int] = {}
    for r in records:
        if r["error"]:
            key = r["error"].split(":")[0]
            errors[key] = errors.get(key, 0) + 1
    opened = [r["opened_s"] for r in records if r["opened_s"] is not None]
    return {
        "unit_latency_ms": {
            "count": len(lat),
            "p50": pct(lat, 50),
            "p99": pct(lat, 99),
            "max": pct(lat, 100),
        },
        "units_closed": sum(r["units_closed"] for r in records),
        "units_answered": sum(r["units_answered"] for r in records),
        "sessions_answered": sum(1 for r in records if r["units_answered"] > 0),
        # What the model said (random weights: nothing meaningful, but how much).
        "frames_spoken": sum(r["units_spoken"] for r in records),
        "frames_received": sum(len(r["frame_times"]) for r in records),
        "text_tokens": sum(r["text_tokens"] for r in records),
        "late_flagged_frames": sum(r["late_flagged"] for r in records),
        "send_lag_ms": {"p50": pct(lag, 50), "p99": pct(lag, 99)},
        "bind_s_max": max(opened) if opened else None,
        "errors": errors,
        "error_sample": next((r["error"] for r in records if r["error"]), None),
    }


def probe_checkpoint(name: str) -> dict[str, Any]:
    """`--check`'s look at a MiniCPM-o checkpoint without an engine: the folder
    written, its config and tokenizer read, and vLLM's own processor run on one
    unit (a second of audio and a camera frame), as the worker's engine would."""
    import shutil

    from antiphon.common.minicpmo import checkpoint

    out: dict[str, Any] = {}
    ckpt = checkpoint.resolve(name)
    try:
        from transformers import AutoTokenizer
        from vllm.transformers_utils.processor import get_processor

        tokenizer = AutoTokenizer.from_pretrained(str(ckpt.folder), trust_remote_code=True)
        out["vocab"] = len(tokenizer)
        processor = get_processor(str(ckpt.folder), trust_remote_code=True)
        out["processor"] = type(processor).__name__
        from PIL import Image

        image = Image.open(io.BytesIO(camera_frame())).convert("RGB")
        text = "(<image>./</image>)(<audio>./</audio>)"
        audio = [np.zeros(16_000, np.float32)]
        got = processor(text=text, images=[image], audios=audio, return_tensors="pt")
        out["unit_tokens"] = int(got["input_ids"].shape[-1])
    finally:
        if ckpt.name.startswith("random:"):
            shutil.rmtree(ckpt.folder, ignore_errors=True)
    return out
