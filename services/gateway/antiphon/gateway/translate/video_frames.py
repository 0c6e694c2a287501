"""`video_frames` on `input_audio_buffer.append`: camera frames riding the
audio, each a base64 JPEG or PNG (a `data:image/...;base64,` URL's prefix is
dropped), and `max_slice_nums`, how many slices a large frame may be cut
into. The edge checks what it can without decoding a picture: the count,
the size, the base64 and the format's signature; stage0 decodes (and
refuses what does not decode). A session whose stage0 does not consume
frames (`capabilities.consumes_video_frames`) drops them at the session.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate import fields

# A unit takes one frame; two on one append leave room for a client that
# sends a frame and a composite of the last ones, as the reference's does.
MAX_FRAMES = 2
# A 1280x720 JPEG is about 200 KB, a PNG up to 2 MB.
MAX_FRAME_BYTES = 2 << 20
# The published model's largest slicing (MiniCPM-o's `max_slice_nums`).
MAX_SLICE_NUMS = 9
_SIGNATURES = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n")
_DATA_URL = re.compile(r"^data:image/[a-z+.-]+;base64,", re.IGNORECASE)


def video_frames(value: Any) -> list[bytes]:
    """The frames of an append's `video_frames`, each checked."""
    if not isinstance(value, list):
        raise ClientError(
            "invalid_value", "`video_frames` must be a list of base64 images", param="video_frames"
        )
    if len(value) > MAX_FRAMES:
        raise ClientError(
            "too_many_video_frames",
            f"{len(value)} frames on one append; at most {MAX_FRAMES}",
            param="video_frames",
        )
    return [_frame(item, f"video_frames[{i}]") for i, item in enumerate(value)]


def max_slice_nums(value: Any) -> int:
    slices = fields.positive_int(value, "max_slice_nums")
    if slices > MAX_SLICE_NUMS:
        raise ClientError(
            "invalid_value",
            f"`max_slice_nums` is at most {MAX_SLICE_NUMS}",
            param="max_slice_nums",
        )
    return slices


def _frame(value: Any, param: str) -> bytes:
    text = _DATA_URL.sub("", fields.string(value, param), count=1)
    if len(text) > MAX_FRAME_BYTES * 4 // 3 + 4:
        raise ClientError(
            "video_frame_too_large", f"`{param}` is over {MAX_FRAME_BYTES} bytes", param=param
        )
    try:
        image = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ClientError("invalid_image", f"`{param}` is not valid base64", param=param) from exc
    if not image.startswith(_SIGNATURES):
        raise ClientError("invalid_image", f"`{param}` is not a JPEG or PNG image", param=param)
    return image
