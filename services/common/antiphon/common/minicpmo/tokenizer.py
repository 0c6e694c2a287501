"""MiniCPM-o's tokenizer: a fast tokenizer that names its markers.

The published tokenizer (remote code, `MiniCPMOTokenizerFast`) is Qwen's BPE
with MiniCPM-o's special tokens, and attributes that vLLM's MiniCPM-o
processor reads to find images, slices, audio and speaker spans in a prompt
(`im_start_id`, `audio_start_id`, ...). This class gives any tokenizer files
those attributes; the token strings are the published ones.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerFast

# Chat turns (Qwen's).
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
# vLLM's processor expands each image, audio clip and slice into this many
# `<unk>` between the markers; the model's embeddings replace them.
UNK = "<unk>"
IMAGE_START, IMAGE_END = "<image>", "</image>"
SLICE_START, SLICE_END = "<slice>", "</slice>"
IMAGE_ID_START, IMAGE_ID_END = "<image_id>", "</image_id>"
AUDIO_START, AUDIO_END = "<|audio_start|>", "<|audio_end|>"
SPK_START, SPK_END = "<|spk_bos|>", "<|spk_eos|>"
TTS_START, TTS_END = "<|tts_bos|>", "<|tts_eos|>"
# Full duplex: each one-second unit is framed by <unit> ... </unit>; the
# model answers a unit with <|listen|> or <|speak|> and text. <|listen|>,
# <|chunk_eos|> and <|chunk_tts_eos|> end a unit; <|turn_eos|> ends the
# model's turn but not the unit (stage0/backends/minicpmo/units.py).
UNIT_START, UNIT_END = "<unit>", "</unit>"
LISTEN, SPEAK = "<|listen|>", "<|speak|>"
CHUNK_EOS, CHUNK_TTS_EOS, TURN_EOS = "<|chunk_eos|>", "<|chunk_tts_eos|>", "<|turn_eos|>"
TTS_PAD, AUDIO, SPK = "<|tts_pad|>", "<|audio|>", "<|spk|>"

SPECIALS = [
    END_OF_TEXT,
    IM_START,
    IM_END,
    UNK,
    IMAGE_START,
    IMAGE_END,
    SLICE_START,
    SLICE_END,
    IMAGE_ID_START,
    IMAGE_ID_END,
    AUDIO_START,
    AUDIO_END,
    AUDIO,
    SPK_START,
    SPK,
    SPK_END,
    TTS_START,
    TTS_PAD,
    TTS_END,
    UNIT_START,
    UNIT_END,
    LISTEN,
    SPEAK,
    CHUNK_EOS,
    CHUNK_TTS_EOS,
    TURN_EOS,
]


class MiniCPMOTokenizerFast(PreTrainedTokenizerFast):
    """The marker strings and ids vLLM's MiniCPM-o processor looks up by name."""

    im_start, im_end = IMAGE_START, IMAGE_END
    slice_start, slice_end = SLICE_START, SLICE_END
    im_id_start, im_id_end = IMAGE_ID_START, IMAGE_ID_END
    audio_start, audio_end = AUDIO_START, AUDIO_END
    spk_start, spk_end = SPK_START, SPK_END
    tts_start, tts_end = TTS_START, TTS_END

    def _id(self, token: str) -> int:
        found = self.convert_tokens_to_ids(token)
        assert isinstance(found, int)
        return found

    @property
    def eos_id(self) -> int | None:
        return self.eos_token_id  # type: ignore[no-any-return]

    @property
    def bos_id(self) -> int | None:
        return self.bos_token_id  # type: ignore[no-any-return]

    @property
    def unk_id(self) -> int:
        return self._id(UNK)

    @property
    def im_start_id(self) -> int:
        return self._id(IMAGE_START)

    @property
    def im_end_id(self) -> int:
        return self._id(IMAGE_END)

    @property
    def slice_start_id(self) -> int:
        return self._id(SLICE_START)

    @property
    def slice_end_id(self) -> int:
        return self._id(SLICE_END)

    @property
    def im_id_start_id(self) -> int:
        return self._id(IMAGE_ID_START)

    @property
    def im_id_end_id(self) -> int:
        return self._id(IMAGE_ID_END)

    @property
    def audio_start_id(self) -> int:
        return self._id(AUDIO_START)

    @property
    def audio_end_id(self) -> int:
        return self._id(AUDIO_END)

    @property
    def spk_start_id(self) -> int:
        return self._id(SPK_START)

    @property
    def spk_end_id(self) -> int:
        return self._id(SPK_END)

    @property
    def tts_start_id(self) -> int:
        return self._id(TTS_START)

    @property
    def tts_end_id(self) -> int:
        return self._id(TTS_END)
