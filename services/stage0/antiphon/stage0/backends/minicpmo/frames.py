"""A camera frame as the thinker takes it: decoded, bounded, and fitted to
the session's `max_slice_nums`.

The edge checked the bytes' format (gateway/translate/video_frames.py);
here they are decoded, and a frame that does not decode, or whose size is
past `MAX_PIXELS` (a decompression bomb), is refused with `invalid_image`.
vLLM's MiniCPM-o processor slices with the checkpoint's own
`max_slice_nums`, whatever a request asks, so the frame is scaled down
instead: an image of at most `n - 1` squares of `scale_resolution` is cut
into at most `n` slices (the processor also tries one more than the area
asks), and one of at most one square is not cut at all.
"""

from __future__ import annotations

import io
import math

from PIL import Image, UnidentifiedImageError

# 40 megapixels: past any camera's frame, short of what would stall a worker.
MAX_PIXELS = 40_000_000
# The published duplex code sends a unit's frame unsliced.
DEFAULT_SLICES = 1


class InvalidImageError(ValueError):
    """A frame that is not a picture the model can take."""


def decoded(data: bytes, max_slice_nums: int, scale_resolution: int) -> Image.Image:
    """The frame `data` as RGB, scaled to be cut into at most `max_slice_nums`
    slices (0: `DEFAULT_SLICES`)."""
    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
        if width * height > MAX_PIXELS:
            raise InvalidImageError(f"a {width}x{height} frame is over {MAX_PIXELS} pixels")
        rgb = image.convert("RGB")
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise InvalidImageError(f"the frame does not decode: {exc}") from exc
    squares = max(1, (max_slice_nums or DEFAULT_SLICES) - 1)
    area = width * height / scale_resolution**2
    if area <= squares:
        return rgb
    scale = math.sqrt(squares / area)
    size = (max(1, int(width * scale)), max(1, int(height * scale)))
    return rgb.resize(size, Image.Resampling.BICUBIC)
