"""A Whisper's weights and tokens: CTranslate2's `model.bin` read as it
is (faster-whisper's layout: float16, self-attention's q, k and v fused), or
random weights of any shape for capacity measurements; the special tokens a
transcription needs from the model's tokenizer."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

# CTranslate2's type ids, in its order.
_CT2_DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16)
Weights = Mapping[str, np.ndarray | torch.Tensor]


@dataclass(frozen=True)
class Shape:
    """A Whisper's dimensions."""

    n_mels: int
    width: int
    heads: int
    encoder_layers: int
    decoder_layers: int
    vocab: int
    audio_positions: int = 1500
    text_positions: int = 448


# openai/whisper-large-v3-turbo: the usual choice on a GPU.
LARGE_V3_TURBO = Shape(
    n_mels=128, width=1280, heads=20, encoder_layers=32, decoder_layers=4, vocab=51866
)


@dataclass(frozen=True)
class Tokens:
    """The special tokens a transcription uses, and the text of the others."""

    prompt: list[int]  # start of transcript, English, transcribe, no timestamps
    end: int
    blank: int
    no_speech: int | None
    suppress: list[int]
    decode: Callable[[list[int]], str]

    @classmethod
    def load(cls, model_dir: Path) -> Tokens:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        config = json.loads((model_dir / "config.json").read_text())

        def token(name: str) -> int | None:
            found = tokenizer.token_to_id(name)
            return None if found is None else int(found)

        names = ("<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>")
        prompt = [token(n) for n in names]
        end = token("<|endoftext|>")
        if None in prompt or end is None:
            raise ValueError(f"{model_dir}: not a Whisper tokenizer")
        return cls(
            prompt=[int(t) for t in prompt if t is not None],
            end=end,
            blank=token("Ġ") or end,
            # large-v3 names it <|nospeech|>, earlier Whispers <|nocaptions|>.
            no_speech=token("<|nospeech|>") or token("<|nocaptions|>"),
            suppress=[int(t) for t in config.get("suppress_ids", [])],
            decode=tokenizer.decode,
        )


def read_ct2(path: Path) -> dict[str, np.ndarray]:
    """The variables of a CTranslate2 model file, by name (aliases resolved)."""
    data = path.read_bytes()
    offset = 0

    def take(fmt: str) -> Any:
        nonlocal offset
        (value,) = struct.unpack_from(fmt, data, offset)
        offset += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal offset
        n = take("H")
        text = data[offset : offset + n - 1].decode()
        offset += n
        return text

    take("I")  # binary version
    string()  # spec name
    take("I")  # spec revision
    out: dict[str, np.ndarray] = {}
    for _ in range(take("I")):
        name = string()
        shape = [take("I") for _ in range(take("B"))]
        dtype = np.dtype(_CT2_DTYPES[take("B")])
        size = take("I")
        out[name] = np.frombuffer(
            data, dtype=dtype, count=size // dtype.itemsize, offset=offset
        ).reshape(shape)
        offset += size
    for _ in range(take("I")):
        alias, target = string(), string()
        out[alias] = out[target]
    return out


def random_weights(shape: Shape, device: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """A Whisper of `shape` with random weights, in CTranslate2's names: the
    compute of the real one, for capacity measurements."""
    w, gen = shape.width, torch.Generator(device=device).manual_seed(0)
    out: dict[str, torch.Tensor] = {}

    def put(name: str, *dims: int, scale: float = 0.02) -> None:
        t = torch.randn(*dims, generator=gen, device=device, dtype=torch.float32) * scale
        out[name] = t.to(dtype)

    def norm(name: str) -> None:
        out[f"{name}/gamma"] = torch.ones(w, device=device, dtype=dtype)
        out[f"{name}/beta"] = torch.zeros(w, device=device, dtype=dtype)

    def linear(name: str, rows: int, cols: int) -> None:
        put(f"{name}/weight", rows, cols)
        put(f"{name}/bias", rows)

    put("encoder/conv1/weight", w, shape.n_mels, 3)
    put("encoder/conv1/bias", w)
    put("encoder/conv2/weight", w, w, 3)
    put("encoder/conv2/bias", w)
    put("encoder/position_encodings/encodings", shape.audio_positions, w)
    put("decoder/position_encodings/encodings", shape.text_positions, w)
    put("decoder/embeddings/weight", shape.vocab, w)
    for side, layers in (("encoder", shape.encoder_layers), ("decoder", shape.decoder_layers)):
        out[f"{side}/num_heads"] = torch.tensor(shape.heads)
        norm(f"{side}/layer_norm")
        for i in range(layers):
            p = f"{side}/layer_{i}"
            norm(f"{p}/self_attention/layer_norm")
            linear(f"{p}/self_attention/linear_0", 3 * w, w)
            linear(f"{p}/self_attention/linear_1", w, w)
            norm(f"{p}/ffn/layer_norm")
            linear(f"{p}/ffn/linear_0", 4 * w, w)
            linear(f"{p}/ffn/linear_1", w, 4 * w)
            if side == "decoder":
                norm(f"{p}/attention/layer_norm")
                linear(f"{p}/attention/linear_0", w, w)
                linear(f"{p}/attention/linear_1", 2 * w, w)
                linear(f"{p}/attention/linear_2", w, w)
    return out
