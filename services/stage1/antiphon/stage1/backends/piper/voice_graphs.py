"""The voice's graph replayed as CUDA graphs: one launch per part, not 2,755.

Run node by node, a batch of Piper's graph is 2,755 launches from Python (a
lone clause took 70 ms on an H200, most of it launching), each waiting its
turn on a card that vLLM and Whisper share. A CUDA graph records a part's
launches once for a shape and replays them with one call; the shapes must
then be fixed. So a batch is padded to a bucket (rows to a power of two,
phonemes to a multiple of `PHONEME_STEP`), and the graph runs in two parts
around the one value it reads on the host (`TorchGraph.host_reads`: the
longest sentence's frames): the text part for (rows, phonemes), then the
audio part for (rows, phonemes, frames), with that count pinned to a multiple
of `FRAME_STEP`. The network masks padding as it always did for a batch, and
voice_batch.py cuts each sentence's audio to its own length.

`prepare` records every part of the buckets that short sentences need (an
eager run, then the capture, each), before the worker is ready; a batch in
any other bucket runs node by node, as does one of more rows than the
largest. Every part's graphs share one memory pool, which is safe because
replays run one at a time, each read back before the next: voice_batch.py
gives them one thread (`replayed`), and its other thread runs only what no
graph covers, node by node, outside the pool.
`capture=False` runs the same padded parts eagerly (a CPU, and the tests).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from antiphon.common.onnx.torch_graph import TorchGraph
from antiphon.stage1.backends.piper.voice_batch import Replayed

Tensor = torch.Tensor
_LOGGER = logging.getLogger(__name__)

# Coarse steps keep the graphs few (each holds its outputs' memory); a
# sentence is padded by at most one step.
PHONEME_STEP = 32
FRAME_STEP = 64


def _rows(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _up(n: int, step: int) -> int:
    return -(-n // step) * step


@dataclass
class _Part:
    """A part of the graph for one bucket: what it leaves (its values, at
    fixed addresses when captured), and what replays it."""

    values: dict[str, Tensor]
    moved: dict[str, Tensor]
    graph: torch.cuda.CUDAGraph | None = None
    # Pinned host buffers the graph's copies read at every replay.
    pinned: list[Tensor] = field(default_factory=list)


class GraphedVoice:
    """`graph` run in padded parts, replayed as CUDA graphs when `capture`;
    `run` as TorchGraph's. Outputs are valid until the next `run`."""

    def __init__(
        self,
        graph: TorchGraph,
        *,
        capture: bool,
        max_rows: int = 32,
        max_frames: int = 512,
        observe_run: Callable[[str], None] = lambda _how: None,
    ) -> None:
        """`observe_run` hears how each batch ran: "graphs" (replayed) or
        "nodes" (node by node: a bucket not recorded, or more rows than any)."""
        if len(graph.host_reads) != 1:
            raise ValueError(
                f"the graph reads {len(graph.host_reads)} values on the host; "
                "its parts can be replayed only around exactly one"
            )
        if capture and graph.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self._graph = graph
        self._frames = graph.host_reads[0]
        self._split = graph.index_after(self._frames)
        self._capture = capture
        self._max_rows = max_rows
        self._max_frames = max_frames
        self._text: dict[tuple[int, int], tuple[dict[str, Tensor], _Part]] = {}
        self._audio: dict[tuple[int, int, int], _Part] = {}
        self._pool = torch.cuda.graph_pool_handle() if capture else None
        # Parts are recorded only by `prepare`: a recording while serving
        # stalls every sentence of the batch behind it.
        self._preparing = False
        self._prepared_phonemes = 0
        self._observe_run = observe_run
        self.output_names = graph.output_names

    @property
    def captured(self) -> int:
        """Parts recorded so far."""
        return sum(p.graph is not None for _i, p in self._text.values()) + sum(
            p.graph is not None for p in self._audio.values()
        )

    @property
    def replayed(self) -> Replayed | None:
        """The largest batch `prepare` recorded every part for (None: none)."""
        if not self._prepared_phonemes:
            return None
        return Replayed(rows=self._max_rows, phonemes=self._prepared_phonemes)

    @torch.inference_mode()
    def prepare(self, max_phonemes: int = 128) -> int:
        """Record every part that a batch of up to `max_phonemes` phonemes
        can need within the largest bucket (each costs about two eager runs).
        Returns how many parts were recorded."""
        if not self._capture:
            return 0
        before = self.captured
        self._preparing = True
        with torch.autocast(self._graph.device.type, dtype=torch.float16, enabled=self._graph.half):
            rows = 1
            while rows <= self._max_rows:
                for width in range(PHONEME_STEP, max_phonemes + 1, PHONEME_STEP):
                    _inputs, text = self._text_part((rows, width))
                    if text.graph is not None:
                        text.graph.replay()  # a padding batch: values the audio part can read
                    for frames in range(FRAME_STEP, self._max_frames + 1, FRAME_STEP):
                        self._audio_part((rows, width), text, frames)
                rows *= 2
        self._preparing = False
        self._prepared_phonemes = max_phonemes // PHONEME_STEP * PHONEME_STEP
        return self.captured - before

    @torch.inference_mode()
    def run(self, feeds: Mapping[str, np.ndarray]) -> list[Tensor]:
        ids = np.asarray(feeds["input"])
        rows, width = ids.shape
        bucket = (_rows(rows), _up(width, PHONEME_STEP))
        if bucket[0] > self._max_rows:
            self._observe_run("nodes")
            return self._graph.run(feeds)
        with torch.autocast(self._graph.device.type, dtype=torch.float16, enabled=self._graph.half):
            inputs, text = self._text_part(bucket)
            inputs["input"].zero_()
            inputs["input"][:rows, :width].copy_(torch.from_numpy(ids))
            # A padding row is one phoneme long: an empty one could divide by zero.
            inputs["input_lengths"].fill_(1)
            inputs["input_lengths"][:rows].copy_(
                torch.from_numpy(np.asarray(feeds["input_lengths"]))
            )
            inputs["scales"].copy_(torch.from_numpy(np.asarray(feeds["scales"])))
            if text.graph is not None:
                text.graph.replay()
            else:
                self._eager(text, inputs)
            frames = _up(int(text.values[self._frames].item()), FRAME_STEP)
            audio = self._audio_part(bucket, text, frames)
            self._observe_run("nodes" if audio.graph is None else "graphs")
            return [audio.values[name] for name in self.output_names]

    def _text_part(self, bucket: tuple[int, int]) -> tuple[dict[str, Tensor], _Part]:
        if bucket not in self._text:
            rows = bucket[0]
            device = self._graph.device
            inputs = {
                "input": torch.zeros(bucket, dtype=torch.int64, device=device),
                "input_lengths": torch.ones(rows, dtype=torch.int64, device=device),
                "scales": torch.zeros(3, dtype=torch.float32, device=device),
            }
            part = _Part(self._graph.start(inputs), self._graph.new_moved())
            if self._preparing:
                part = self._record(part, 0, self._split)
            self._text[bucket] = (inputs, part)
        return self._text[bucket]

    def _eager(self, text: _Part, inputs: dict[str, Tensor]) -> None:
        """The text part run node by node from freshly fed inputs."""
        text.values = self._graph.start(inputs)
        text.moved = self._graph.new_moved()
        self._graph.run_nodes(text.values, text.moved, 0, self._split)

    def _audio_part(self, bucket: tuple[int, int], text: _Part, frames: int) -> _Part:
        key = (*bucket, frames)
        recorded = self._audio.get(key)
        if recorded is None:
            values = dict(text.values)
            # The frames' count, pinned: every row is padded to it, masked as a
            # batch's shorter sentences always were.
            read = text.values[self._frames]
            values[self._frames] = torch.tensor(frames, dtype=read.dtype).reshape(read.shape)
            part = _Part(values, dict(text.moved))
            stop = self._graph.node_count
            if not self._preparing or text.graph is None or frames > self._max_frames:
                self._graph.run_nodes(part.values, part.moved, self._split, stop)
                return part
            recorded = self._audio[key] = self._record(part, self._split, stop)
        assert recorded.graph is not None
        recorded.graph.replay()
        return recorded

    def _record(self, part: _Part, start: int, stop: int) -> _Part:
        """Nodes `start` to `stop` over `part`, recorded as a CUDA graph after
        one eager run (which warms what a first call sets up: cuDNN's choices,
        the allocator) on a side stream, as torch's capture wants. A capture
        computes nothing: the caller replays it."""
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._graph.run_nodes(dict(part.values), dict(part.moved), start, stop)
        torch.cuda.current_stream().wait_stream(side)
        recorded = _Part(dict(part.values), dict(part.moved), torch.cuda.CUDAGraph())
        assert recorded.graph is not None
        with torch.cuda.graph(recorded.graph, pool=self._pool):
            self._graph.run_nodes(
                recorded.values, recorded.moved, start, stop, pinned=recorded.pinned
            )
        _LOGGER.debug("voice graph recorded: nodes %d-%d", start, stop)
        return recorded
