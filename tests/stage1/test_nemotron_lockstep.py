"""The `nemotron` lockstep: sessions taking and leaving rows of the batch
each hear exactly their own speech, and its step loop serves them."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from antiphon.stage1.backends.nemotron.lockstep import NemotronLockstep, load
from antiphon.stage1.frames.session import Pcm
from antiphon.stage1.metrics import DuplexMetrics
from antiphon.stage1.settings import Stage1Settings
from tests.stage1.nemotron_reference import TinyNemotron
from tests.support.polling import eventually

# Batched against NeMo's batch-1 stream of the same codes: float32 rounding.
ATOL = 1e-6


class Row:
    """A session's row reduced to its tokens and the samples they decode to."""

    def __init__(self, lockstep: NemotronLockstep, tokens: list[int]) -> None:
        self.lockstep = lockstep
        self.slot = lockstep.acquire(self)
        assert self.slot is not None
        self.tokens = tokens
        self.waiting: deque[int] = deque()
        self.sent: list[int] = []
        self.pcm: list[Pcm] = []

    def send(self) -> None:
        token = self.tokens[len(self.sent)]
        self.waiting.append(token)
        self.sent.append(token)
        self.lockstep.notify()

    def leave(self) -> None:
        assert self.slot is not None
        self.lockstep.release(self.slot, self)

    def queued(self) -> int:
        return len(self.waiting)

    def head_codes(self) -> Sequence[int] | None:
        return [self.waiting[0]] if self.waiting else None

    def decoded(self, pcm: Pcm) -> bool:
        self.waiting.popleft()
        self.pcm.append(pcm.copy())
        return True


@pytest.mark.models
async def test_each_session_hears_its_own_speech_as_nemo_makes_it_alone(
    tiny_nemotron: TinyNemotron,
) -> None:
    """A row taken again after its session left starts as a fresh session;
    steps a row sits out and rows that catch up change nobody's samples."""
    lockstep = NemotronLockstep(tiny_nemotron.tts, tiny_nemotron.prompt, 2, gather_s=0)
    rows = {name: tiny_nemotron.tokens(seed, 30) for seed, name in enumerate("abc")}
    held = {"a": Row(lockstep, rows["a"]), "b": Row(lockstep, rows["b"])}
    done: dict[str, Row] = {}
    for step in range(26):
        if step == 8:
            done["b"] = held.pop("b")
            done["b"].leave()
        if step == 10:
            held["c"] = Row(lockstep, rows["c"])  # takes b's row, which must start fresh
            assert held["c"].slot == done["b"].slot
        for name, row in held.items():
            if (step + ord(name)) % 4 != 0:
                row.send()
        if step == 15:
            held["a"].send()  # two waiting: it catches up one a step
        lockstep.step()
    while lockstep.step():
        pass
    await lockstep.close()
    for name, row in {**held, **done}.items():
        assert not row.waiting
        assert len(row.pcm) == len(row.sent) > 5, name
        want = tiny_nemotron.streamed(tiny_nemotron.codes(row.sent))
        np.testing.assert_allclose(np.concatenate(row.pcm), want, rtol=0, atol=ATOL, err_msg=name)


@pytest.mark.models
async def test_the_step_loop_speaks_a_burst_in_one_step(tiny_nemotron: TinyNemotron) -> None:
    registry = CollectorRegistry()
    lockstep = NemotronLockstep(
        tiny_nemotron.tts, tiny_nemotron.prompt, 2, metrics=DuplexMetrics(registry), gather_s=0.2
    )
    lockstep.start(on_failure=lambda: pytest.fail("the step loop died"))
    rows = [Row(lockstep, tiny_nemotron.tokens(seed, 3)) for seed in range(2)]
    for row in rows:
        row.send()
        await asyncio.sleep(0.005)  # a burst spread over a few ms

    async def spoken() -> bool:
        return all(row.pcm for row in rows)

    await eventually(spoken, timeout_s=10)
    assert registry.get_sample_value("antiphon_stage1_duplex_step_seconds_count") == 1
    assert registry.get_sample_value("antiphon_stage1_duplex_frames_total", {"sent": "audio"}) == 2
    assert all(len(row.pcm[0]) == 1764 for row in rows)  # 80 ms at 22,050 Hz
    await lockstep.close()


async def test_the_nemotron_backend_names_its_missing_checkpoint_setting() -> None:
    settings = Stage1Settings(backend="nemotron", duplex_checkpoint="")
    with pytest.raises(SystemExit, match="duplex_checkpoint"):
        load(settings, DuplexMetrics(CollectorRegistry()))
