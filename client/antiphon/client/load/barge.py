"""Barge-in trials: speak over the answer, time how soon it stops.

On the `server_vad` lane a live `Microphone` asks a question that wants a
long answer and, as soon as the answer's first audio arrives, says
something else. Measured from the send of the first chunk of that speech
(its leading silence trimmed, so that is the speech onset) to the answer's
`response.done` and to its last audio delta.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from antiphon.client.load.lanes import SERVER_VAD
from antiphon.client.load.questions import CHUNK_BYTES, CHUNK_MS
from antiphon.client.load.report import stats
from antiphon.client.load.session import LoadSession, SessionError
from antiphon.client.microphone import Microphone

# The answer goes on this long after the onset at most, or the trial is a timeout.
DONE_WITHIN_S = 30.0


async def barge_in_trial(
    session: LoadSession, question: bytes, barge: bytes, timeout_s: float
) -> dict[str, Any]:
    """One trial on an open `server_vad` session: `question` then, over the
    answer's first audio, `barge` (PCM16 at the session's input rate)."""
    log = session.new_turn()
    client = session.client
    async with Microphone(client, chunk_ms=CHUNK_MS) as mic:
        asked = asyncio.ensure_future(mic.say(question))
        interrupted: asyncio.Future[float] | None = None
        try:
            await session.until(lambda: log.first("response.created"), timeout_s)
            created = log.first("response.created")
            assert created is not None
            response_id = created.response_id
            await session.until(lambda: any(r == response_id for _, r in log.audio), timeout_s)
            interrupted = asyncio.ensure_future(mic.say(barge))
            chunks = -(-len(barge) // CHUNK_BYTES)
            await session.until(interrupted.done, timeout_s + chunks * CHUNK_MS / 1000, interrupted)
            # The chunk that ended the barge-in speech, and the one that began it.
            t_onset = client.sent_at(client.last_sent_by(interrupted.result()) - (chunks - 1))
            left = t_onset + DONE_WITHIN_S - time.monotonic()
            try:
                await session.until(
                    lambda: log.first("response.done", response_id=response_id), max(0.0, left)
                )
            except TimeoutError:
                return {"status": "timeout", "note": "no response.done within 30 s of the barge-in"}
        finally:
            for said in (asked, interrupted):
                if said is not None:
                    said.cancel()
    done = log.first("response.done", response_id=response_id)
    assert done is not None
    response = done.raw.get("response") or {}
    audio = [t for t, rid in log.audio if rid == response_id]
    after = [t for t in audio if t > t_onset]
    return {
        "status": response.get("status", ""),
        "reason": (response.get("status_details") or {}).get("reason") or "",
        # Speech onset sent -> response.done (whatever its status).
        "onset_to_done_ms": round((done.received_at - t_onset) * 1000, 1),
        # Speech onset sent -> the response's last audio delta (0: none after the onset).
        "onset_to_last_audio_ms": round((max(after) - t_onset) * 1000, 1) if after else 0.0,
        "audio_deltas_after_onset": len(after),
        "audio_deltas": len(audio),
    }


async def run_barge_in(
    url: str,
    question: bytes,
    barge: bytes,
    trials: int,
    timeout_s: float,
    progress: bool = True,
    **client_options: Any,
) -> dict[str, Any]:
    """`trials` barge-in trials, one session each, one after another; their summary."""
    from tqdm import tqdm

    out: list[dict[str, Any]] = []
    for _ in tqdm(range(trials), desc="barge-in", unit="trial", disable=not progress):
        try:
            s = await LoadSession.open(0, url, SERVER_VAD, timeout_s, **client_options)
        except SessionError as exc:
            out.append({"status": "error", "note": exc.code})
            continue
        try:
            out.append(await barge_in_trial(s, question, barge, timeout_s))
        except (SessionError, TimeoutError) as exc:
            out.append({"status": "error", "note": getattr(exc, "code", "timeout")})
        finally:
            await s.close()
        await asyncio.sleep(0.5)
    return summarize(out)


def summarize(trials: list[dict[str, Any]]) -> dict[str, Any]:
    cancelled = [t for t in trials if t.get("status") == "cancelled"]
    statuses = Counter(str(t.get("status")) for t in trials)
    result: dict[str, Any] = {"trials": trials, "statuses": dict(statuses)}
    if cancelled:
        done = [t["onset_to_done_ms"] for t in cancelled]
        last = [t["onset_to_last_audio_ms"] for t in cancelled]
        # From sending the first 200 ms chunk that holds speech: the server has
        # the whole chunk at once. A live microphone heard that onset one chunk
        # earlier, hence `barge_in_from_capture_ms`.
        result["barge_in_ms"] = stats(done, 50, 95)
        result["barge_in_from_capture_ms"] = stats([d + CHUNK_MS for d in done], 50, 95)
        # The last audio delta of the cancelled response, after the onset (0: none after).
        result["audio_stop_ms"] = stats(last, 50, 95)
    else:
        result["barge_in_ms"] = None
        result["barge_in_from_capture_ms"] = None
        result["audio_stop_ms"] = None
        result["note"] = (
            f"the server never cancelled a response on barge-in speech ({dict(statuses)}): "
            "barge-in on the server_vad lane is not implemented, or the answer ended first"
        )
    if len(cancelled) not in (0, len(trials)):
        result["note"] = f"only {len(cancelled)}/{len(trials)} responses were cancelled"
    return result
