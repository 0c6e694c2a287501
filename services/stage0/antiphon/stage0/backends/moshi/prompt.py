"""PersonaPlex's prompt: what a row steps through, forced, before its call.

PersonaPlex (a Moshi fine-tune) was trained to hear, before the
conversation, the assistant's voice and its instructions. NVIDIA's server
prefills, each frame with the user stream held at `SINE_TOKENS` ("no user"):

1. the voice prompt: a clip of the voice, Mimi-encoded, as the agent's audio
   (text: padding);
2. `SILENCE_FRAMES` frames of `SILENCE_TOKENS` (the agent's silence);
3. the text prompt, `<system> instructions <system>` in plain sentencepiece
   pieces, one a frame on the text stream (agent audio: silence);
4. `SILENCE_FRAMES` more of silence.

`Prompter` turns a session's (instructions, voice) into those frames, then
into what to force at each of the row's first steps (`align`). Voices are
`<voice>.wav` clips in `duplex_voice_dir`, encoded once each by a Mimi of
their own (not the batch's streaming one). PersonaPlex's published `.pt`
voices are embeddings, not audio: moshi 0.2.13 has no path to step them.
"""

from __future__ import annotations

import logging
import re
import wave
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from antiphon.common.moshi_checkpoint import FRAME_RATE_HZ, SAMPLE_RATE, Checkpoint

if TYPE_CHECKING:
    import torch
    from moshi.models.compression import MimiModel
    from moshi.models.lm import LMModel
    from sentencepiece import SentencePieceProcessor

log = logging.getLogger(__name__)

# PersonaPlex's constants (its server's): the user stream's "nobody there",
# and the agent's silence, as Mimi codes (taken modulo a smaller codebook).
SINE_TOKENS = (430, 1268, 381, 1611, 1095, 1495, 56, 472)
SILENCE_TOKENS = (948, 243, 1178, 546, 1736, 1030, 1978, 2008)
SILENCE_FRAMES = int(0.5 * FRAME_RATE_HZ)  # 6
SYSTEM_TAG = "<system>"
# Voice clips are brought to this loudness before encoding.
VOICE_RMS_DBFS = -24.0
# A voice name is a file name in the voice folder, nothing that walks out of it.
_VOICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# Unknown voice names logged (each once), at most this many remembered.
_UNKNOWN_LOGGED = 1024

PromptFormat = Literal["none", "personaplex"]
Codes = tuple[int, ...]
Encode = Callable[[str], list[int]]


@dataclass(frozen=True)
class ForcedFrame:
    """What one prefill step forces for its row: the user codes the LM hears
    (instead of Mimi's encoding of the row's audio) and the text token and
    agent codes written in place of what the LM generated."""

    user: Codes
    text: int
    agent: Codes


@dataclass(frozen=True)
class Streams:
    """A prompt as frames, the streams as the model should hold them."""

    user: list[Codes]
    text: list[int]
    agent: list[Codes]

    def __len__(self) -> int:
        return len(self.text)


def align(streams: Streams) -> list[ForcedFrame]:
    """The forced values per step that make the LM's streams hold `streams`.

    moshi's LMGen writes what step `o` generates at position o+1; the text
    and codebook 0 have no delay and codebooks 1..7 a delay of 1 (position p
    holds their frame p-1). Position 0 is the model's initial token, so the
    prompt's frame i goes to position i+1: step o forces text[o] and agent[o]'s
    codebook 0, and agent[o-1]'s codebooks 1..7 (at step 0 those are never
    read: the model sees its initial token there). The user stream, fed as
    input, is `user[o]` at step o. The last frame's codebooks 1..7 are the
    LM's own, generated at the first live step.
    """
    frames: list[ForcedFrame] = []
    for o in range(len(streams)):
        previous = streams.agent[o - 1] if o else streams.agent[o]
        frames.append(
            ForcedFrame(
                user=streams.user[o],
                text=streams.text[o],
                agent=(streams.agent[o][0], *previous[1:]),
            )
        )
    return frames


def prompt_format(setting: str, checkpoint: Checkpoint) -> PromptFormat:
    """`duplex_prompt_format` resolved: "auto" is "personaplex" for
    PersonaPlex-shaped weights, else "none"."""
    if setting == "auto":
        return "personaplex" if checkpoint.personaplex else "none"
    if setting == "personaplex":
        return "personaplex"
    if setting == "none":
        return "none"
    raise ValueError(f"unknown duplex_prompt_format {setting!r}")


def system_prompt(instructions: str) -> str:
    """The text prompt as PersonaPlex was trained on it: the instructions
    between `<system>` tags (plain pieces, no BOS)."""
    inner = instructions.strip()
    return f"{SYSTEM_TAG} {inner} {SYSTEM_TAG}" if inner else f"{SYSTEM_TAG} {SYSTEM_TAG}"


def text_encoder(tokenizer: SentencePieceProcessor | None, text_card: int) -> Encode:
    """Text as the model's text tokens: its tokenizer's plain pieces (no BOS);
    random weights have none, and each character is a valid id, so that tests
    can run it."""

    def encode(text: str) -> list[int]:
        if tokenizer is None:
            return [4 + ord(ch) % (text_card - 4) for ch in text]
        return [int(i) for i in tokenizer.encode(text)]

    return encode


def default_voice_dir(checkpoint: Checkpoint) -> Path | None:
    """`<checkpoint folder>/voices`; None for random weights."""
    return None if checkpoint.random else Path(checkpoint.name) / "voices"


class Prompter:
    """A row's prefill from a session's (instructions, voice)."""

    def __init__(
        self,
        *,
        card: int,
        text_pad: int,
        num_codebooks: int,
        encode_text: Encode,
        encode_voice: Callable[[npt.NDArray[np.float32]], list[Codes]],
        voice_dir: Path | None,
    ) -> None:
        if num_codebooks != len(SINE_TOKENS):
            raise ValueError(f"PersonaPlex prompts need 8 codebooks, the model has {num_codebooks}")
        self.sine: Codes = tuple(t % card for t in SINE_TOKENS)
        self.silence: Codes = tuple(t % card for t in SILENCE_TOKENS)
        self.text_pad = text_pad
        self._encode_text = encode_text
        self._encode_voice = encode_voice
        self.voice_dir = voice_dir
        self._voices: dict[str, list[Codes]] = {}
        self._unknown: set[str] = set()

    @classmethod
    def of_checkpoint(
        cls,
        checkpoint: Checkpoint,
        lm: LMModel,
        device: str | torch.device,
        voice_dir: Path | None,
    ) -> Prompter:
        """The prompter for `checkpoint`: its tokenizer (random weights: each
        character a valid id, so tests can run it) and a Mimi of its own."""
        encode_text = text_encoder(checkpoint.text_tokenizer(), int(lm.text_card))
        mimi: list[MimiModel] = []

        def encode_voice(pcm: npt.NDArray[np.float32]) -> list[Codes]:
            import torch

            if not mimi:
                mimi.append(checkpoint.mimi(device))
            codec = mimi[0]
            first = next(iter(codec.parameters()))
            x = torch.from_numpy(pcm).to(first.device, first.dtype)
            with torch.no_grad():
                codes = codec.encode(x[None, None])  # [1, K, frames], not streaming
            return [tuple(frame) for frame in codes[0].T.tolist()]

        return cls(
            card=int(lm.card),
            text_pad=int(lm.text_padding_token_id),
            num_codebooks=int(lm.dep_q),
            encode_text=encode_text,
            encode_voice=encode_voice,
            voice_dir=voice_dir,
        )

    # ----------------------------------------------------------- the prompt
    def streams(self, instructions: str, voice: str) -> Streams:
        voiced = self.voice(voice) or []
        text = self._encode_text(system_prompt(instructions))
        agent = [*voiced, *[self.silence] * (2 * SILENCE_FRAMES + len(text))]
        pad = self.text_pad
        texts = [pad] * (len(voiced) + SILENCE_FRAMES) + text + [pad] * SILENCE_FRAMES
        return Streams([self.sine] * len(agent), texts, agent)

    def prefill(self, instructions: str, voice: str) -> list[ForcedFrame]:
        """The forced frames a row steps through before its call."""
        return align(self.streams(instructions, voice))

    # ----------------------------------------------------------- voices
    def voice(self, name: str) -> list[Codes] | None:
        """`name`'s voice prompt (Mimi codes per frame), encoded at first use;
        None for no voice or one there is no clip of (logged once)."""
        if not name:
            return None
        cached = self._voices.get(name)
        if cached is not None:
            return cached
        path = self._clip(name)
        codes: list[Codes] | None = None
        problem = "no voice clip: no voice prompt"
        if path is not None:
            try:
                codes = self._encode_voice(read_voice(path))
            except (OSError, ValueError, EOFError, wave.Error) as exc:
                problem = f"voice clip unreadable ({exc}): no voice prompt"
        if codes is None:
            if name not in self._unknown and len(self._unknown) < _UNKNOWN_LOGGED:
                self._unknown.add(name)
                log.warning(problem, extra={"voice": name, "voice_dir": str(self.voice_dir)})
            return None
        self._voices[name] = codes
        log.info("voice prompt encoded", extra={"voice": name, "frames": len(codes)})
        return codes

    def preload(self) -> list[str]:
        """Encode every clip in the voice folder now (worker start), so that no
        session's open waits for one; the names of those encoded."""
        if self.voice_dir is None or not self.voice_dir.is_dir():
            return []
        return [
            path.stem
            for path in sorted(self.voice_dir.glob("*.wav"))
            if self.voice(path.stem) is not None
        ]

    def _clip(self, name: str) -> Path | None:
        if self.voice_dir is None or not _VOICE_NAME.fullmatch(name):
            return None
        path = self.voice_dir / f"{name}.wav"
        return path if path.is_file() else None


def read_voice(path: Path) -> npt.NDArray[np.float32]:
    """A PCM WAV clip (any rate, mono or stereo, 8/16/32-bit) as Mimi's input:
    mono, 24 kHz, float32, at `VOICE_RMS_DBFS`."""
    with wave.open(str(path), "rb") as clip:
        rate, channels, width = clip.getframerate(), clip.getnchannels(), clip.getsampwidth()
        raw = clip.readframes(clip.getnframes())
    formats: dict[int, tuple[str, float, float]] = {
        1: ("u1", 128.0, 128.0),
        2: ("<i2", 0.0, 32768.0),
        4: ("<i4", 0.0, 2147483648.0),
    }
    if width not in formats:
        raise ValueError(f"{path}: {8 * width}-bit WAV; use 8, 16 or 32-bit PCM")
    dtype, offset, scale = formats[width]
    samples = (np.frombuffer(raw, dtype=dtype).astype(np.float32) - offset) / scale
    mono = samples.reshape(-1, channels).mean(axis=1)
    return normalise(resample(mono, rate))


def resample(pcm: npt.NDArray[np.float32], rate: int) -> npt.NDArray[np.float32]:
    if rate == SAMPLE_RATE:
        return pcm.astype(np.float32)
    import soxr

    out: npt.NDArray[np.float32] = soxr.resample(pcm, rate, SAMPLE_RATE, quality="HQ")
    return out.astype(np.float32)


def normalise(pcm: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Scaled to an RMS of `VOICE_RMS_DBFS` (silence stays silence), clipped."""
    rms = float(np.sqrt(np.mean(np.square(pcm, dtype=np.float64)))) if pcm.size else 0.0
    if rms < 1e-6:
        return pcm
    gain = 10 ** (VOICE_RMS_DBFS / 20) / rms
    out: npt.NDArray[np.float32] = np.clip(pcm * gain, -1.0, 1.0).astype(np.float32)
    return out
