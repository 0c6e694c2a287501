"""Every session's sentences on a worker, voiced together on one device.

A GPU runs Piper's network on 64 sentences in about the time of one, so the
sessions of a worker do not each call it: `BatchedVoiceGraph` stands in for
the onnxruntime session that `PiperVoice` calls, per sentence, from many
synthesis threads at once. Each call waits in one queue; one batch at a time
takes everything waiting (up to `max_batch`, and only sentences asking the
same scales: the graph takes one set per batch), pads the phoneme ids, and
runs the graph once. A sentence that arrives while a batch runs goes in the
next one, so a lone caller is never held back for company, and under load the
batches grow by themselves. A response's first clause (`voicing_first`, set
by the scheduler) joins a batch ahead of later clauses: it is what a listener
is waiting for.

Recorded CUDA graphs (voice_graphs.py) replay batches of up to so many rows
and phonemes in a few milliseconds; anything larger runs node by node, a
hundred milliseconds and more on a shared card. With graphs, two threads take
batches: one only what the graphs replay (at most their rows), the other
the longer sentences, so a short clause never waits behind, or is padded to,
a long one.

Each sentence gets back exactly what a batch of one would give: the padding
is masked inside the network, and its audio ends where its phoneme durations
(the graph's alignment output) say.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import onnx
import torch

from antiphon.stage1.speech.scheduler import voicing_first


class VoiceGraph(Protocol):
    """What runs the voice's network: `TorchGraph`, node by node, or
    `GraphedVoice` (voice_graphs.py), as CUDA graphs."""

    output_names: list[str]

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[torch.Tensor]: ...


def with_durations(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its phoneme durations (the one Ceil's output, in hops) as its
    second output, if they are not one already: they say where each sentence
    of a batch ends. Piper's `add_alignment_output` does the same, for
    onnxruntime; this one needs no Piper (the GPU bench runs without it)."""
    ceils = [out for node in model.graph.node if node.op_type == "Ceil" for out in node.output]
    if len(ceils) != 1:
        raise ValueError(f"expected one Ceil (the phoneme durations), found {len(ceils)}")
    if ceils[0] not in {o.name for o in model.graph.output}:
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(ceils[0]))
    return model


@dataclass(frozen=True)
class _Output:
    """What `PiperVoice` reads of an onnxruntime session's outputs."""

    name: str


@dataclass
class _Sentence:
    ids: np.ndarray
    scales: np.ndarray
    heard: Future[list[np.ndarray]]
    first: bool
    arrived: float = field(default_factory=time.perf_counter)

    @property
    def key(self) -> bytes:
        return self.scales.tobytes()


@dataclass(frozen=True)
class Replayed:
    """The largest batch the graph replays as recorded: `rows` sentences of
    up to `phonemes` ids each."""

    rows: int
    phonemes: int


@dataclass(frozen=True)
class _Lane:
    """One batch thread: the sentences it takes, and how many at most."""

    name: str
    takes: Callable[[_Sentence], bool]
    max_batch: int


class BatchedVoiceGraph:
    """A voice graph whose `run` calls, from any thread, are batched together.

    The graph must have the alignment output (`add_alignment_output`): it is
    what says where each sentence's audio ends. `hop` is the voice's samples
    per duration unit (its config's hop length).
    """

    def __init__(
        self,
        graph: VoiceGraph,
        *,
        hop: int,
        max_batch: int,
        observe_batch: Callable[[int], None] = lambda _size: None,
        observe_wait: Callable[[float], None] = lambda _s: None,
        observe_run: Callable[[float], None] = lambda _s: None,
        replayed: Replayed | None = None,
    ) -> None:
        """`replayed`: what the graph replays quickly (recorded CUDA graphs);
        such batches then get a thread of their own. `observe_wait`: each
        sentence's seconds from its call to its batch's start; `observe_run`:
        each batch's seconds on the device, its audio back on the host
        included. Between them they split the voice's share of a first audio
        into waiting for a batch and being in one."""
        if len(graph.output_names) < 2:
            raise ValueError("the voice graph needs its alignment output to be batched")
        self._graph = graph
        self._hop = hop
        self._observe_batch = observe_batch
        self._observe_wait = observe_wait
        self._observe_run = observe_run
        # In arrival order.
        self._waiting: list[_Sentence] = []
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._closed = False
        most = max(1, max_batch)
        if replayed is None:
            self._lanes = [_Lane("tts-batch", lambda _s: True, most)]
        else:
            self._lanes = [
                _Lane(
                    "tts-graphs",
                    lambda s: len(s.ids) <= replayed.phonemes,
                    min(most, replayed.rows),
                ),
                _Lane("tts-nodes", lambda s: len(s.ids) > replayed.phonemes, most),
            ]
        self._threads = [
            threading.Thread(target=self._loop, args=(lane,), name=lane.name, daemon=True)
            for lane in self._lanes
        ]
        for thread in self._threads:
            thread.start()

    def get_outputs(self) -> list[_Output]:
        return [_Output(name) for name in self._graph.output_names]

    def run(
        self, output_names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]
    ) -> list[np.ndarray]:
        """One sentence (a batch of one, as `PiperVoice` feeds it); blocks until voiced."""
        if "sid" in feeds:
            raise NotImplementedError("multi-speaker voices are not batched")
        ids = np.asarray(feeds["input"]).reshape(-1)
        heard: Future[list[np.ndarray]] = Future()
        scales = np.asarray(feeds["scales"], dtype=np.float32)
        with self._lock:
            if self._closed:
                raise RuntimeError("the voice is closed")
            self._waiting.append(_Sentence(ids, scales, heard, voicing_first()))
            self._wakeup.notify_all()
        outputs = heard.result()
        if output_names is None:
            return outputs
        return [outputs[self._graph.output_names.index(name)] for name in output_names]

    def _take(self, lane: _Lane) -> list[_Sentence] | None:
        with self._lock:
            while True:
                if self._closed:
                    return None
                # First clauses ahead; a stable sort keeps arrival order otherwise.
                ours = sorted(
                    (s for s in self._waiting if lane.takes(s)), key=lambda s: not s.first
                )
                if ours:
                    break
                self._wakeup.wait()
            key = ours[0].key
            batch = [s for s in ours if s.key == key][: lane.max_batch]
            taken = {id(s) for s in batch}
            self._waiting = [s for s in self._waiting if id(s) not in taken]
            return batch

    def _loop(self, lane: _Lane) -> None:
        while (batch := self._take(lane)) is not None:
            self._observe_batch(len(batch))
            started = time.perf_counter()
            for sentence in batch:
                self._observe_wait(started - sentence.arrived)
            try:
                results = self._voice(batch)
            except Exception as exc:
                results = [exc] * len(batch)
            self._observe_run(time.perf_counter() - started)
            for sentence, outputs in zip(batch, results, strict=True):
                if isinstance(outputs, BaseException):
                    sentence.heard.set_exception(outputs)
                else:
                    sentence.heard.set_result(outputs)

    def _voice(self, batch: list[_Sentence]) -> list[list[np.ndarray] | BaseException]:
        """Each sentence's outputs. A batch the device has no memory for is voiced
        in halves instead (a GPU shared with the LLM's KV cache has little to
        spare, and long sentences take memory in proportion), down to one
        sentence: only a sentence that does not fit alone fails."""
        try:
            return list(self._voice_once(batch))
        except torch.OutOfMemoryError as exc:
            if len(batch) == 1:
                return [exc.with_traceback(None)]  # its frames hold the batch's tensors
        half = len(batch) // 2
        return self._voice(batch[:half]) + self._voice(batch[half:])

    def _voice_once(self, batch: list[_Sentence]) -> list[list[np.ndarray]]:
        lengths = np.array([len(s.ids) for s in batch], dtype=np.int64)
        ids = np.zeros((len(batch), int(lengths.max())), dtype=np.int64)
        for row, sentence in enumerate(batch):
            ids[row, : len(sentence.ids)] = sentence.ids
        audio, durations = self._graph.run(
            {"input": ids, "input_lengths": lengths, "scales": batch[0].scales}
        )[:2]
        spans = durations.float().cpu().numpy()
        results = []
        for row, length in enumerate(lengths):
            row_spans = spans[row, ..., :length]
            samples = int(row_spans.sum()) * self._hop
            # Only the row's own samples leave the device, not the padding. The
            # shapes are a batch of one's: audio (1, 1, 1, n), durations (1, 1, t).
            row_audio = audio[row, ..., :samples].float().cpu().numpy()
            results.append([row_audio[None], row_spans[None]])
        return results

    def close(self) -> None:
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, []
            self._wakeup.notify_all()
        for sentence in waiting:
            sentence.heard.set_exception(RuntimeError("the voice is closed"))
        for thread in self._threads:
            thread.join(timeout=5)
