"""The mimi decoder batch: rows are independent, and the step loop batches bursts."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from antiphon.stage1.backends.mimi.lockstep import MimiLockstep, load
from antiphon.stage1.frames.session import Pcm
from antiphon.stage1.metrics import DuplexMetrics
from antiphon.stage1.settings import Stage1Settings
from tests.support.polling import eventually

if TYPE_CHECKING:
    from moshi.models.compression import MimiModel


class Row:
    """A session's row reduced to its frames and the samples they decode to."""

    def __init__(self, lockstep: MimiLockstep) -> None:
        self.lockstep = lockstep
        self.slot = lockstep.acquire(self)
        assert self.slot is not None
        self.waiting: deque[list[int]] = deque()
        self.sent: list[list[int]] = []
        self.pcm: list[Pcm] = []

    def send(self, codes: list[int]) -> None:
        self.waiting.append(codes)
        self.sent.append(codes)
        self.lockstep.notify()

    def leave(self) -> None:
        assert self.slot is not None
        self.lockstep.release(self.slot, self)

    def queued(self) -> int:
        return len(self.waiting)

    def head_codes(self) -> Sequence[int] | None:
        return self.waiting[0] if self.waiting else None

    def decoded(self, pcm: Pcm) -> bool:
        self.waiting.popleft()
        self.pcm.append(pcm.copy())
        return True


def reference(mimi: MimiModel, frames: list[list[int]]) -> Pcm:
    """`frames` decoded alone: batch 1, fresh streaming state, one frame a call."""
    import torch

    out = []
    with torch.no_grad(), mimi.streaming(1):
        for codes in frames:
            out.append(mimi.decode(torch.tensor(codes).view(1, -1, 1))[0, 0].numpy())
    return np.concatenate(out)


def assert_same_samples(ours: Pcm, alone: Pcm, name: str = "") -> None:
    """Equal to float64 rounding: batched and single-row kernels may sum in
    another order (some 1e-16 apart); any state a row took from another, or
    lost, would be off by far more than this."""
    assert ours.dtype == alone.dtype == np.float64
    np.testing.assert_allclose(ours, alone, rtol=0, atol=1e-12, err_msg=name)


def codes_stream(seed: int, n: int, lockstep: MimiLockstep) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    shape = (n, lockstep.num_codebooks)
    return rng.integers(0, lockstep.cardinality, shape).tolist()  # type: ignore[no-any-return]


@pytest.mark.models
async def test_each_row_decodes_exactly_as_its_frames_alone(tiny_mimi: MimiModel) -> None:
    """Rows joining and leaving mid-run (a row taken again after its session
    left), and steps a row sits out, change no row's samples by a bit."""
    lockstep = MimiLockstep(tiny_mimi, 3, gather_s=0)
    streams = {name: codes_stream(seed, 40, lockstep) for seed, name in enumerate("abcd")}
    rows: dict[str, Row] = {}
    done: dict[str, Row] = {}
    for step in range(24):
        if step == 0:
            rows["a"], rows["b"] = Row(lockstep), Row(lockstep)
        if step == 3:
            rows["c"] = Row(lockstep)
        if step == 9:
            done["b"] = rows.pop("b")
            done["b"].leave()
        if step == 12:
            rows["d"] = Row(lockstep)  # takes b's row, which must start fresh
            assert rows["d"].slot == done["b"].slot
        for name, row in rows.items():
            # Each row sits some steps out, on a pattern of its own.
            if (step + ord(name)) % 4 != 0:
                row.send(streams[name][len(row.sent)])
        # Some steps find a row with two frames waiting: it catches up one a step.
        if step == 15:
            rows["a"].send(streams["a"][len(rows["a"].sent)])
        lockstep.step()
    while lockstep.step():
        pass
    await lockstep.close()
    outputs = {**rows, **done}
    for name, row in outputs.items():
        assert not row.waiting
        assert len(row.pcm) == len(row.sent) > 5, name
        assert_same_samples(np.concatenate(row.pcm), reference(tiny_mimi, row.sent), name)
    a, c = np.concatenate(outputs["a"].pcm), np.concatenate(outputs["c"].pcm)
    # Different codes, different speech: the comparison above could tell rows apart.
    assert np.abs(a[: len(c)] - c).max() > 0.01


@pytest.mark.models
async def test_rows_stay_exact_past_the_decoder_attention_context(
    tiny_mimi: MimiModel,
) -> None:
    """Past its context (125 frames) the decoder's transformer overwrites its
    ring cache; a row that sat steps out must still match its reference."""
    lockstep = MimiLockstep(tiny_mimi, 2, gather_s=0)
    a, b = Row(lockstep), Row(lockstep)
    stream_a, stream_b = codes_stream(1, 150, lockstep), codes_stream(2, 150, lockstep)
    for step in range(150):
        a.send(stream_a[step])
        if step % 3:
            b.send(stream_b[len(b.sent)])
        lockstep.step()
    await lockstep.close()
    for row in (a, b):
        assert_same_samples(np.concatenate(row.pcm), reference(tiny_mimi, row.sent))


def decoded(rows: list[Row], frames: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return all(len(row.pcm) >= frames for row in rows)

    return check


@pytest.mark.models
async def test_the_step_loop_decodes_a_burst_in_one_step(tiny_mimi: MimiModel) -> None:
    registry = CollectorRegistry()
    metrics = DuplexMetrics(registry)
    lockstep = MimiLockstep(tiny_mimi, 3, metrics=metrics, gather_s=0.2)
    lockstep.start(on_failure=lambda: pytest.fail("the step loop died"))
    rows = [Row(lockstep) for _ in range(3)]
    assert registry.get_sample_value("antiphon_stage1_duplex_rows_active") == 3
    for row, codes in zip(rows, codes_stream(0, 3, lockstep), strict=True):
        row.send(codes)
        await asyncio.sleep(0.005)  # a burst spread over a few ms
    await eventually(decoded(rows, 1), timeout_s=5)
    assert registry.get_sample_value("antiphon_stage1_duplex_step_seconds_count") == 1
    assert registry.get_sample_value("antiphon_stage1_duplex_frames_total", {"sent": "audio"}) == 3
    rows[0].leave()
    assert registry.get_sample_value("antiphon_stage1_duplex_rows_active") == 2
    await lockstep.close()


@pytest.mark.models
async def test_a_row_without_a_frame_holds_a_step_up_no_longer_than_the_window(
    tiny_mimi: MimiModel,
) -> None:
    lockstep = MimiLockstep(tiny_mimi, 2, gather_s=0.05)
    lockstep.start(on_failure=lambda: pytest.fail("the step loop died"))
    talking, idle = Row(lockstep), Row(lockstep)
    talking.send(codes_stream(0, 1, lockstep)[0])
    await eventually(decoded([talking], 1), timeout_s=5)
    assert not idle.pcm
    await lockstep.close()


@pytest.mark.models
async def test_a_row_behind_catches_up_without_waiting_for_the_others(
    tiny_mimi: MimiModel,
) -> None:
    """With frames piled up, a step does not wait for a row that has none
    (here the window is longer than the test would wait)."""
    lockstep = MimiLockstep(tiny_mimi, 2, gather_s=60)
    lockstep.start(on_failure=lambda: pytest.fail("the step loop died"))
    behind, idle = Row(lockstep), Row(lockstep)
    for codes in codes_stream(0, 4, lockstep):
        behind.send(codes)
    await eventually(decoded([behind], 3), timeout_s=5)
    assert not idle.pcm
    await lockstep.close()


async def test_the_mimi_backend_names_its_missing_checkpoint_setting() -> None:
    settings = Stage1Settings(backend="mimi", duplex_checkpoint="")
    with pytest.raises(SystemExit, match="duplex_checkpoint"):
        load(settings, DuplexMetrics(CollectorRegistry()))
