"""ITU-T G.711 µ-law and A-law <-> PCM16 (OpenAI's `audio/pcmu` / `audio/pcma`).

The gateway decodes what clients send in G.711 and the session encodes its
output deltas into it, so the codec is shared. Decoding is a 256-entry
table, encoding a 65536-entry one indexed by the int16 bit pattern, both
built once from the ITU definition rather than taken from `audioop`, which
Python 3.13 removed.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import numpy.typing as npt

from antiphon.common.audio import check_pcm16


def ulaw_to_pcm16(data: bytes) -> bytes:
    return _ulaw_decode_table()[np.frombuffer(data, dtype=np.uint8)].tobytes()


def alaw_to_pcm16(data: bytes) -> bytes:
    return _alaw_decode_table()[np.frombuffer(data, dtype=np.uint8)].tobytes()


def pcm16_to_ulaw(pcm16: bytes) -> bytes:
    return _ulaw_encode_table()[_as_index(pcm16)].tobytes()


def pcm16_to_alaw(pcm16: bytes) -> bytes:
    return _alaw_encode_table()[_as_index(pcm16)].tobytes()


def _as_index(pcm16: bytes) -> npt.NDArray[np.uint16]:
    check_pcm16(pcm16)
    # The int16 bit pattern indexes the 65536-entry encode table.
    return np.frombuffer(pcm16, dtype="<i2").astype(np.int16).view(np.uint16)


def _frozen(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    a.flags.writeable = False
    return a


# G.711 µ-law: the 14-bit magnitude plus a bias of 33 falls in one of eight
# segments (a power-of-two range); the code is sign, segment, and the four
# bits below the segment's leading one, all inverted.
_ULAW_BIAS = 0x84  # 33 in 14-bit units, scaled to 16 bits
_ULAW_CLIP = 8159
_ULAW_SEGMENT_ENDS = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
# G.711 A-law: the 13-bit magnitude in eight segments; the first two share a
# step size; even bits are inverted (XOR 0x55) on the line.
_ALAW_SEGMENT_ENDS = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])


@functools.cache
def _ulaw_decode_table() -> npt.NDArray[np.int16]:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    return _frozen(np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype("<i2"))


@functools.cache
def _alaw_decode_table() -> npt.NDArray[np.int16]:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    seg = (a & 0x70) >> 4
    t = (a & 0x0F) << 4
    t = np.where(seg == 0, t + 8, (t + 0x108) << np.maximum(seg - 1, 0))
    return _frozen(np.where(a & 0x80, t, -t).astype("<i2"))


def _all_levels(shift: int) -> npt.NDArray[np.int32]:
    """Every int16 value in bit-pattern order, as the codec's magnitude units."""
    return (
        np.arange(65536, dtype=np.int32).astype(np.uint16).view(np.int16).astype(np.int32) >> shift
    )


@functools.cache
def _ulaw_encode_table() -> npt.NDArray[np.uint8]:
    x = _all_levels(2)
    mask = np.where(x < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(x), _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    seg = np.searchsorted(_ULAW_SEGMENT_ENDS, mag)
    code = np.where(seg >= 8, 0x7F, (seg << 4) | ((mag >> (seg + 1)) & 0x0F))
    return _frozen(((code ^ mask) & 0xFF).astype(np.uint8))


@functools.cache
def _alaw_encode_table() -> npt.NDArray[np.uint8]:
    x = _all_levels(3)
    mask = np.where(x >= 0, 0xD5, 0x55)
    # One's complement for negatives: -1 and 0 land in the two smallest steps.
    mag = np.where(x >= 0, x, -x - 1)
    seg = np.searchsorted(_ALAW_SEGMENT_ENDS, mag)
    quant = np.where(seg < 2, mag >> 1, mag >> np.maximum(seg, 1)) & 0x0F
    code = np.where(seg >= 8, 0x7F, (seg << 4) | quant)
    return _frozen(((code ^ mask) & 0xFF).astype(np.uint8))
