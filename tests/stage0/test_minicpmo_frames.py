"""A camera frame as MiniCPM-o's thinker takes it (backends/minicpmo/frames.py):
scaled so the checkpoint's processor cuts it into no more slices than the
append's `max_slice_nums` asks, and refused when it is not a picture."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from antiphon.common.minicpmo.image_processor import MiniCPMVImageProcessor
from antiphon.stage0.backends.minicpmo import frames

SQUARE = 448


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 240)).save(out, format="PNG")
    return out.getvalue()


def _slices(image: Image.Image) -> int:
    grid = MiniCPMVImageProcessor(scale_resolution=SQUARE).get_sliced_grid(image.size)
    return 1 if grid is None else grid[0] * grid[1]


@pytest.mark.parametrize(
    ("size", "asked"),
    [((1280, 720), 0), ((1280, 720), 1), ((1920, 1080), 3), ((4000, 3000), 6), ((1920, 1080), 9)],
)
def test_a_frame_is_cut_into_no_more_slices_than_asked(size: tuple[int, int], asked: int) -> None:
    image = frames.decoded(_png(*size), asked, SQUARE)
    assert _slices(image) <= max(asked, frames.DEFAULT_SLICES)
    assert abs(image.width / image.height - size[0] / size[1]) < 0.02  # the aspect is kept
    assert image.mode == "RGB"


def test_a_small_frame_is_left_as_it_is() -> None:
    assert frames.decoded(_png(320, 240), 1, SQUARE).size == (320, 240)


@pytest.mark.parametrize(
    "data",
    [b"\x89PNG\r\n\x1a\n" + bytes(40), b"\xff\xd8\xff" + b"junk" * 10, _png(320, 240)[:60]],
    ids=["png-header-only", "jpeg-junk", "truncated-png"],
)
def test_a_frame_that_does_not_decode_is_an_invalid_image(data: bytes) -> None:
    with pytest.raises(frames.InvalidImageError):
        frames.decoded(data, 1, SQUARE)
