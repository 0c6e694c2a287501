"""G.711 from the ITU definition: known code points, the tables' symmetry and
round trip, and the stdlib's `audioop` as an oracle where Python still has it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from antiphon.common import g711

Codec = Callable[[bytes], bytes]
ALL_CODES = bytes(range(256))
ALL_PCM16 = np.arange(-32768, 32768, dtype="<i2").tobytes()


def _samples(pcm16: bytes) -> list[int]:
    return np.frombuffer(pcm16, dtype="<i2").tolist()


@pytest.mark.parametrize(
    ("code", "value"),
    [
        (0xFF, 0),  # positive zero
        (0x7F, 0),  # negative zero
        (0x80, 32124),  # largest positive
        (0x00, -32124),  # largest negative
        (0xFE, 8),  # one step above zero (segment 0 steps by 8)
        (0xF0, 120),  # the top of segment 0
        (0xEF, 132),  # the bottom of segment 1, which steps by 16
    ],
)
def test_ulaw_known_code_points(code: int, value: int) -> None:
    assert _samples(g711.ulaw_to_pcm16(bytes([code]))) == [value]


@pytest.mark.parametrize(
    ("code", "value"),
    [
        (0xD5, 8),  # smallest positive: even bits inverted on the line
        (0x55, -8),
        (0xAA, 32256),  # largest positive
        (0x2A, -32256),
        (0xD4, 24),
    ],
)
def test_alaw_known_code_points(code: int, value: int) -> None:
    assert _samples(g711.alaw_to_pcm16(bytes([code]))) == [value]


def test_ulaw_encode_of_decode_is_the_identity_but_for_negative_zero() -> None:
    """Every code decodes to a level that encodes back to it; 0x7F and 0xFF
    both decode to 0, which encodes as positive zero."""
    again = g711.pcm16_to_ulaw(g711.ulaw_to_pcm16(ALL_CODES))
    assert [c for c in range(256) if again[c] != c] == [0x7F]
    assert again[0x7F] == 0xFF


def test_alaw_encode_of_decode_is_the_identity_for_all_256_codes() -> None:
    assert g711.pcm16_to_alaw(g711.alaw_to_pcm16(ALL_CODES)) == ALL_CODES


@pytest.mark.parametrize(
    ("encode", "decode"),
    [(g711.pcm16_to_ulaw, g711.ulaw_to_pcm16), (g711.pcm16_to_alaw, g711.alaw_to_pcm16)],
)
def test_g711_decode_tables_are_odd_symmetric_and_monotonic(encode: Codec, decode: Codec) -> None:
    levels = np.array(_samples(decode(ALL_CODES)))
    assert sorted(set(levels)) == sorted(set(-levels))
    # Encoding every 16-bit value is monotonic: larger input never gets a smaller level.
    quantised = np.array(_samples(decode(encode(ALL_PCM16))))
    assert (np.diff(quantised) >= 0).all()
    assert quantised[0] == levels.min() and quantised[-1] == levels.max()


@pytest.mark.parametrize(
    ("encode", "decode", "max_rel"),
    [
        (g711.pcm16_to_ulaw, g711.ulaw_to_pcm16, 0.07),
        (g711.pcm16_to_alaw, g711.alaw_to_pcm16, 0.07),
    ],
)
def test_g711_round_trip_error_is_small_relative_to_the_level(
    encode: Codec, decode: Codec, max_rel: float
) -> None:
    """Companding keeps the relative error small (about 1/32 of the level) over
    the range above the smallest segments."""
    x = np.array(_samples(ALL_PCM16))
    y = np.array(_samples(decode(encode(ALL_PCM16))))
    loud = np.abs(x) > 1024
    assert (np.abs(y - x)[loud] / np.abs(x)[loud]).max() < max_rel
    assert np.abs(y - x)[~loud].max() <= 64


def test_g711_matches_audioop_where_python_still_has_it() -> None:
    """The stdlib's C implementation (gone in Python 3.13) as an independent oracle."""
    audioop = pytest.importorskip("audioop")
    assert g711.pcm16_to_ulaw(ALL_PCM16) == audioop.lin2ulaw(ALL_PCM16, 2)
    assert g711.pcm16_to_alaw(ALL_PCM16) == audioop.lin2alaw(ALL_PCM16, 2)
    assert g711.ulaw_to_pcm16(ALL_CODES) == audioop.ulaw2lin(ALL_CODES, 2)
    assert g711.alaw_to_pcm16(ALL_CODES) == audioop.alaw2lin(ALL_CODES, 2)


def test_g711_tables_are_read_only() -> None:
    with pytest.raises(ValueError):
        g711._ulaw_encode_table()[0] = 1
