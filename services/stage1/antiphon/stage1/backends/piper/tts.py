"""Piper text-to-speech: one audio chunk per Piper sentence, with per-word text marks.

Marks let the session cut the assistant's transcript at the word that ends
at `played_ms`. They come from Piper's phoneme/audio alignment when the
voice can expose it (patched in memory at load, which needs the `onnx`
package); otherwise each phoneme is given an equal share of the chunk.
Either way text and phonemes are matched by phoneme counts: each text word
is weighed by phonemizing it alone, so "3.5" (three point five) or "Dr."
(doctor) land where they are spoken, not where their characters would put
them.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import onnxruntime
from piper import PiperVoice
from piper.config import PiperConfig, SynthesisConfig

from antiphon.common.audio import duration_ms, float32_to_pcm16, resample_pcm16
from antiphon.common.audio_formats import PCM_OUTPUT_RATE
from antiphon.stage1.speech.voice import SpeechChunk

_LOGGER = logging.getLogger(__name__)

_WORD = re.compile(r"\S+")
_SPACE = re.compile(r"\s*")
# A word that ends a sentence: terminal punctuation, then maybe closing quotes.
_SENTENCE_END = re.compile(r"[.!?\u2026][\"')\]}\u201d\u2019\u00bb*_]*$")


@dataclass(frozen=True)
class TextWord:
    """A word's span in some text, and how many sounds it takes to say."""

    start: int
    end: int
    weight: int


def phoneme_weight(phonemes: Sequence[str]) -> int:
    """How many sounds a phoneme sequence has: letters only.

    Stress and length marks are modifier letters (Lm) and punctuation or
    spaces are pauses, so none of them counts as a sound of its own.
    """
    return sum(1 for p in phonemes if p and unicodedata.category(p[0]) in ("Ll", "Lu", "Lo"))


def text_words(text: str, weigh: Callable[[str], int]) -> list[TextWord]:
    """Words of `text` with their weights; a word without letters or digits is silent."""
    words = []
    for m in _WORD.finditer(text):
        token = m.group()
        weight = weigh(token) if any(ch.isalnum() for ch in token) else 0
        words.append(TextWord(m.start(), m.end(), weight))
    return words


def _ends_sentence(text: str, word: TextWord) -> bool:
    """Terminal punctuation, or a line break after the word (espeak breaks there too)."""
    gap = _SPACE.match(text, word.end)
    return bool(_SENTENCE_END.search(text, word.start, word.end)) or (
        gap is not None and "\n" in gap.group()
    )


def split_text(text: str, words: Sequence[TextWord], sentence_weights: Sequence[int]) -> list[str]:
    """Share `text` among Piper's sentences, cutting only after a whole word.

    Piper (espeak) decides the sentence breaks and does not report them in
    text terms, so each cut goes after the word whose running weight comes
    closest to the running weight of the sentences so far, preferring words
    that end a sentence while enough of them are left for the remaining cuts
    (espeak breaks at "Dr." but not at "e.g.", so punctuation alone cannot
    decide). Whitespace after a cut starts the next piece, so the pieces
    join back to `text`.
    """
    if len(sentence_weights) <= 1:
        return [text]
    running = list(itertools.accumulate((w.weight for w in words), initial=0))
    # Index i is the cut after words[i - 1]; 0 is the cut before any word.
    preferred = [i for i in range(1, len(words) + 1) if _ends_sentence(text, words[i - 1])]
    pieces: list[str] = []
    start, last_cut, target = 0, 0, 0
    for k, sentence_weight in enumerate(sentence_weights[:-1]):
        target += sentence_weight
        cuts_left = len(sentence_weights) - 1 - k
        options = [i for i in preferred if i > last_cut]
        if len(options) < cuts_left:
            options = list(range(last_cut, len(words) + 1))
        # Ties go to the later cut so silent tokens ("-") stay with their sentence.
        cut = min(reversed(options), key=lambda i: abs(running[i] - target))
        end = max(words[cut - 1].end if cut else 0, start)
        pieces.append(text[start:end])
        start, last_cut = end, cut
    pieces.append(text[start:])
    return pieces


def sound_ends(
    alignment: Sequence[tuple[str, int]] | None, phonemes: Sequence[str], num_samples: int
) -> list[int]:
    """The sample at which each sound of a chunk ends, in order.

    With Piper's alignment (BOS, phonemes, EOS, each with its samples) these
    are the model's own durations, pauses included; without, the sounds
    share the chunk evenly.
    """
    if alignment is not None:
        ends, pos = [], 0
        for phoneme, samples in alignment:
            pos += samples
            if phoneme_weight([phoneme]):
                ends.append(min(pos, num_samples))
        return ends
    total = phoneme_weight(phonemes)
    return [num_samples * i // total for i in range(1, total + 1)]


def chunk_marks(
    chunk_text: str,
    words: Sequence[TextWord],
    ends: Sequence[int],
    voice_rate: int,
    chunk_ms: int,
) -> list[tuple[int, int]]:
    """Marks for one chunk: where each word ends, in chars and ms, then the whole text.

    `words` carry offsets into `chunk_text`; `ends` come from `sound_ends`.
    A word ends with the sound that brings the running sound count to its
    share of the chunk's sounds (the text's weights rarely match exactly).
    """
    total_text = sum(w.weight for w in words)
    marks: list[tuple[int, int]] = []
    if ends and total_text:
        scale = len(ends) / total_text
        running, last_ms = 0, 0
        for w in words:
            running += w.weight
            if w.end >= len(chunk_text):
                break
            idx = min(max(math.ceil(running * scale - 1e-9) - 1, 0), len(ends) - 1)
            last_ms = max(last_ms, min(ends[idx] * 1000 // voice_rate, chunk_ms))
            marks.append((w.end, last_ms))
    marks.append((len(chunk_text), chunk_ms))
    return marks


class VoiceSession(Protocol):
    """What `PiperVoice` calls of an onnxruntime session, and what a batched one adds."""

    def get_outputs(self) -> Sequence[Any]: ...

    def run(self, output_names: Any, feeds: Any) -> Any: ...

    def close(self) -> None: ...


def _session(voice_onnx: Path, threads: int, alignments: bool) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    # Piper's own loader takes onnxruntime's default (one thread per core);
    # stage workers share few cores, so the thread count is ours to set.
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = threads
    model: str | bytes = str(voice_onnx)
    if alignments:
        model = _with_alignment_output(voice_onnx)
    return onnxruntime.InferenceSession(
        model, sess_options=options, providers=["CPUExecutionProvider"]
    )


def _with_alignment_output(voice_onnx: Path) -> str | bytes:
    """The voice with its per-phoneme duration tensor exposed, or the plain path if unavailable."""
    try:
        import onnx
        from piper.patch_voice_with_alignment import add_alignment_output
    except ImportError:
        _LOGGER.warning("onnx is not installed: text marks fall back to even phoneme spacing")
        return str(voice_onnx)
    model = onnx.load(str(voice_onnx))
    try:
        add_alignment_output(model)
    except ValueError as exc:  # already patched on disk, or an unusual export
        _LOGGER.info("voice not patched for alignments: %s", exc)
        return str(voice_onnx)
    serialized: bytes = model.SerializeToString()
    return serialized


def _batched_session(voice_onnx: Path, batched: Batched, hop: int, threads: int) -> VoiceSession:
    """The voice's graph in torch on `batched.device`, every caller's sentences batched."""
    import onnx
    import torch

    from antiphon.common.onnx.torch_graph import TorchGraph
    from antiphon.stage1.backends.piper.voice_batch import (
        BatchedVoiceGraph,
        VoiceGraph,
        with_durations,
    )
    from antiphon.stage1.backends.piper.voice_graphs import GraphedVoice

    torch.set_num_threads(threads)
    model = with_durations(onnx.load(str(voice_onnx)))
    nodes = TorchGraph(model, device=batched.device)
    graph: VoiceGraph = nodes
    replayed = None
    if batched.cuda_graphs:
        graph = GraphedVoice(nodes, capture=True, observe_run=batched.observe_graph_run)
        started = time.monotonic()
        recorded = graph.prepare()
        _LOGGER.info(
            "voice graphs recorded",
            extra={"graphs": recorded, "seconds": round(time.monotonic() - started, 1)},
        )
        replayed = graph.replayed
    return BatchedVoiceGraph(
        graph,
        hop=hop,
        max_batch=batched.max_batch,
        observe_batch=batched.observe_batch,
        observe_wait=batched.observe_wait,
        observe_run=batched.observe_run,
        replayed=replayed,
    )


@dataclass(frozen=True)
class Batched:
    """Run the voice in torch on `device`, sentences of all callers batched
    (voice_batch.py), instead of onnxruntime on the CPU, one at a time."""

    device: str
    max_batch: int = 128
    observe_batch: Callable[[int], None] = lambda _size: None
    # A sentence's wait for its batch, and a batch's run (voice_batch.py), seconds.
    observe_wait: Callable[[float], None] = lambda _s: None
    observe_run: Callable[[float], None] = lambda _s: None
    # Replay the network as CUDA graphs (voice_graphs.py): a CUDA device only.
    cuda_graphs: bool = False
    # How each batch ran with `cuda_graphs`: "graphs" or "nodes".
    observe_graph_run: Callable[[str], None] = lambda _how: None


class PiperTts:
    """A loaded Piper voice that turns text into `SpeechChunk`s at `out_rate`.

    `synthesize` blocks while it computes; run it off the event loop. One
    instance may serve several threads: onnxruntime sessions are thread-safe
    and Piper serialises its phonemizer.
    """

    def __init__(
        self,
        voice_onnx: Path,
        voice_config: Path,
        *,
        threads: int = 1,
        out_rate: int = PCM_OUTPUT_RATE,
        alignments: bool = True,
        varied: bool = True,
        batched: Batched | None = None,
    ) -> None:
        """`varied=False` takes out the noise Piper samples at every call, so the
        same text always gives the same samples (tests need audio that an ASR
        either hears or does not, run after run). With `batched`, `synthesize`
        may be called from many threads at once: their sentences share batches."""
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        config = PiperConfig.from_dict(json.loads(Path(voice_config).read_text(encoding="utf-8")))
        session: VoiceSession
        if batched is None:
            session = _session(Path(voice_onnx), threads, alignments)
        else:
            session = _batched_session(Path(voice_onnx), batched, config.hop_length, threads)
        self._session = session
        self._voice = PiperVoice(session=session, config=config)
        self.out_rate = out_rate
        self.voice_rate: int = config.sample_rate
        self.has_alignments = len(session.get_outputs()) > 1
        self._varied = varied
        self._length_scale = config.length_scale

    def warm(self) -> None:
        """Voice a sentence once: a GPU loads its kernels on first use (seconds
        for the first batch), which then falls before the worker is ready, not
        on a caller's first answer."""
        for _chunk in self.synthesize("Hello, how are you today?"):
            pass

    def close(self) -> None:
        """Stop the batch thread, if any; sentences still waiting fail."""
        if not isinstance(self._session, onnxruntime.InferenceSession):
            self._session.close()

    def _weigh(self, word: str) -> int:
        return max(1, sum(phoneme_weight(s) for s in self._voice.phonemize(word)))

    def _synthesis_config(self, speed: float) -> SynthesisConfig:
        """Piper's length scale is time per phoneme: speaking faster is a shorter one."""
        config = SynthesisConfig(length_scale=self._length_scale / speed)
        if not self._varied:
            config.noise_scale = config.noise_w_scale = 0.0
        return config

    def synthesize(self, text: str, speed: float = 1.0) -> Iterator[SpeechChunk]:
        """Speak `text` at `speed` (1 normal): one chunk per Piper sentence;
        chunk texts join back to `text`.

        Text Piper finds nothing to say in (spaces, a lone dash) still comes
        back as one silent chunk, so the transcript stays complete.
        """
        if not text:
            return
        sentences = [s for s in self._voice.phonemize(text) if s]
        words = text_words(text, self._weigh)
        pieces = split_text(text, words, [phoneme_weight(s) for s in sentences])
        offset = 0
        chunks = self._voice.synthesize(
            text, syn_config=self._synthesis_config(speed), include_alignments=self.has_alignments
        )
        for piece, audio in zip(pieces, chunks, strict=False):
            pcm = resample_pcm16(
                float32_to_pcm16(audio.audio_float_array), self.voice_rate, self.out_rate
            )
            chunk_ms = duration_ms(len(pcm), self.out_rate)
            alignment = None
            if audio.phoneme_alignments:
                alignment = [(a.phoneme, int(a.num_samples)) for a in audio.phoneme_alignments]
            ends = sound_ends(alignment, audio.phonemes, len(audio.audio_float_array))
            local = [
                TextWord(w.start - offset, w.end - offset, w.weight)
                for w in words
                if offset <= w.start < offset + len(piece)
            ]
            marks = chunk_marks(piece, local, ends, self.voice_rate, chunk_ms)
            yield SpeechChunk(pcm16=pcm, text=piece, duration_ms=chunk_ms, marks=marks)
            offset += len(piece)
        if offset < len(text):
            # Nothing was spoken for the rest (or Piper split differently than
            # its phonemizer predicted): keep the transcript whole regardless.
            rest = text[offset:]
            yield SpeechChunk(pcm16=b"", text=rest, duration_ms=0, marks=[(len(rest), 0)])
