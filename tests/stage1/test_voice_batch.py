"""The shipped Piper voice batched across threads (voice_batch.py): every caller
hears what it would alone, first clauses go ahead, a batch too large for the
device is split, and each sentence's wait and each batch's run are observed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from antiphon.common.onnx.torch_graph import TorchGraph
from tests.stage1.voicing import at_once, feeds

# Every case runs the real voice.
pytestmark = pytest.mark.models


def test_sentences_voiced_together_sound_as_each_does_alone(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.backends.piper.voice_batch import BatchedVoiceGraph

    assert len({len(s) for s in sentences}) == 4
    alone = TorchGraph(voice_model)
    sizes: list[int] = []
    waits: list[float] = []
    runs: list[float] = []
    batched = BatchedVoiceGraph(
        TorchGraph(voice_model),
        hop=256,
        max_batch=8,
        observe_batch=sizes.append,
        observe_wait=waits.append,
        observe_run=runs.append,
    )
    results: dict[int, list[np.ndarray]] = {}

    def voice(i: int) -> None:
        results[i] = batched.run(None, feeds(sentences[i % len(sentences)]))

    at_once(len(sentences) * 2, voice)
    batched.close()
    assert max(sizes) > 1, sizes  # they did share a batch
    assert sum(sizes) == len(sentences) * 2 == len(results)
    assert len(waits) == sum(sizes) and len(runs) == len(sizes)  # per sentence, per batch
    for i, (audio, durations) in results.items():
        want_audio, want_durations = (
            t.numpy() for t in alone.run(feeds(sentences[i % len(sentences)]))
        )
        assert audio.shape == want_audio.shape, i
        np.testing.assert_allclose(audio, want_audio, atol=1e-3)
        np.testing.assert_array_equal(durations, want_durations)


class Slow(TorchGraph):
    """The voice's graph taking at least `seconds` a batch (a busy shared card)."""

    def __init__(self, model: bytes, seconds: float) -> None:
        super().__init__(model)
        self.seconds = seconds
        self.running = threading.Event()

    def run(self, feeds: Any) -> list[Any]:
        self.running.set()
        time.sleep(self.seconds)
        return super().run(feeds)


def test_a_sentence_behind_a_batch_waits_its_run_and_both_are_observed(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.backends.piper.voice_batch import BatchedVoiceGraph

    graph = Slow(voice_model, seconds=0.3)
    waits: list[float] = []
    runs: list[float] = []
    batched = BatchedVoiceGraph(
        graph, hop=256, max_batch=8, observe_wait=waits.append, observe_run=runs.append
    )
    first = threading.Thread(target=batched.run, args=(None, feeds(sentences[0])))
    first.start()
    assert graph.running.wait(10)
    batched.run(None, feeds(sentences[1]))  # arrives while the first batch runs
    first.join(10)
    batched.close()
    assert len(runs) == 2 and min(runs) >= 0.3, runs
    assert waits[0] < 0.1 and 0.15 < waits[1] < runs[0] + 0.1, (waits, runs)


class ScarceMemory(TorchGraph):
    """The voice's graph on a device that holds at most `rows` sentences at once,
    and no sentence longer than `longest` phonemes even alone: more runs out of
    memory, as on a GPU shared with an LLM's cache."""

    def __init__(self, model: bytes, rows: int, longest: int = 10**6) -> None:
        super().__init__(model)
        self.rows, self.longest = rows, longest
        self.tried: list[int] = []

    def run(self, feeds: Any) -> list[Any]:
        self.tried.append(len(feeds["input"]))
        if len(feeds["input"]) > self.rows or feeds["input"].shape[1] > self.longest:
            raise torch.OutOfMemoryError("CUDA out of memory (scarce, for the test)")
        return super().run(feeds)


def test_a_batch_too_large_for_the_device_is_voiced_in_halves(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.backends.piper.voice_batch import BatchedVoiceGraph

    graph = ScarceMemory(voice_model, rows=1)
    batched = BatchedVoiceGraph(graph, hop=256, max_batch=8)
    results: dict[int, list[np.ndarray]] = {}

    def voice(i: int) -> None:
        results[i] = batched.run(None, feeds(sentences[i]))

    at_once(len(sentences), voice)
    batched.close()
    assert max(graph.tried) > 1  # a batch was tried whole, then split
    alone = TorchGraph(voice_model)
    for i, (audio, _durations) in results.items():
        np.testing.assert_allclose(audio, alone.run(feeds(sentences[i]))[0].numpy(), atol=1e-3)
    assert len(results) == len(sentences)  # every caller was voiced, none failed


def test_only_a_sentence_the_device_cannot_hold_alone_fails(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.backends.piper.voice_batch import BatchedVoiceGraph

    longest = max(map(len, sentences))
    graph = ScarceMemory(voice_model, rows=2, longest=longest - 1)
    batched = BatchedVoiceGraph(graph, hop=256, max_batch=8)
    outcomes: dict[int, str] = {}

    def voice(i: int) -> None:
        try:
            batched.run(None, feeds(sentences[i]))
            outcomes[i] = "voiced"
        except torch.OutOfMemoryError:
            outcomes[i] = "out of memory"

    at_once(len(sentences), voice)
    batched.close()
    assert outcomes == {
        i: "out of memory" if len(s) == longest else "voiced" for i, s in enumerate(sentences)
    }


class Held(TorchGraph):
    """The voice's graph, recording each batch's sentence lengths; a batch with
    a sentence of `held_from` phonemes or more waits until `release` (a long
    sentence run node by node, which takes a while on a shared card)."""

    def __init__(self, model: bytes, held_from: int) -> None:
        super().__init__(model)
        self.held_from = held_from
        self.batches: list[list[int]] = []
        self.held = threading.Event()
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def run(self, feeds: Any) -> list[Any]:
        lengths = [int(n) for n in feeds["input_lengths"]]
        self.batches.append(lengths)
        if max(lengths) >= self.held_from:
            self.held.set()
            assert self._released.wait(timeout=30)
        return super().run(feeds)


def _in_threads(calls: list[Callable[[], object]]) -> list[threading.Thread]:
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    return threads


def test_a_first_clause_joins_a_batch_ahead_of_later_clauses(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.backends.piper.voice_batch import BatchedVoiceGraph
    from antiphon.stage1.speech.scheduler import voicing

    longest, *others = sorted(sentences, key=len, reverse=True)
    graph = Held(voice_model, held_from=len(longest))
    batched = BatchedVoiceGraph(graph, hop=256, max_batch=1)

    def voice(ids: list[int], first: bool) -> Callable[[], object]:
        def call() -> object:
            with voicing(first=first):
                return batched.run(None, feeds(ids))

        return call

    # The long sentence holds the batch thread while the rest queue up: two
    # later clauses, then a first clause.
    threads = _in_threads([voice(longest, first=False)])
    assert graph.held.wait(timeout=30)
    later, first = others[:2], others[2]
    for ids in later:
        threads += _in_threads([voice(ids, first=False)])
        time.sleep(0.05)  # arrival order among the later ones
    threads += _in_threads([voice(first, first=True)])
    time.sleep(0.2)
    graph.release()
    for thread in threads:
        thread.join(timeout=60)
    batched.close()
    assert graph.batches == [[len(longest)], [len(first)], *([len(ids)] for ids in later)]


def test_with_replayed_graphs_a_short_clause_never_waits_behind_a_long_one(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.backends.piper.voice_batch import BatchedVoiceGraph, Replayed

    longest, *short = sorted(sentences, key=len, reverse=True)
    graph = Held(voice_model, held_from=len(longest))
    batched = BatchedVoiceGraph(
        graph, hop=256, max_batch=8, replayed=Replayed(rows=2, phonemes=len(longest) - 1)
    )
    voiced: list[int] = []

    def voice(ids: list[int]) -> Callable[[], object]:
        def call() -> object:
            out = batched.run(None, feeds(ids))
            voiced.append(len(ids))
            return out

        return call

    threads = _in_threads([voice(longest)])
    assert graph.held.wait(timeout=30)
    threads += _in_threads([voice(ids) for ids in short * 2])
    for thread in threads[1:]:
        thread.join(timeout=60)
    # Every short clause was voiced while the long one was still held, in
    # batches no larger than the graphs replay and never with the long one.
    assert sorted(voiced) == sorted(len(ids) for ids in short * 2)
    short_batches = [b for b in graph.batches if len(longest) not in b]
    assert sum(map(len, short_batches)) == len(short) * 2
    assert max(map(len, short_batches)) <= 2
    assert graph.batches.count([len(longest)]) == 1
    graph.release()
    threads[0].join(timeout=60)
    batched.close()
    assert voiced[-1] == len(longest)


def test_a_closed_batch_fails_its_callers_at_once(voice_model: bytes) -> None:
    from antiphon.stage1.backends.piper.voice_batch import BatchedVoiceGraph

    batched = BatchedVoiceGraph(TorchGraph(voice_model), hop=256, max_batch=4)
    batched.close()
    with pytest.raises(RuntimeError, match="closed"):
        batched.run(None, feeds([1, 0, 2]))
