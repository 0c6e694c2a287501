"""Camera frames on `input_audio_buffer.append` (`video_frames`,
`max_slice_nums`): what the edge lets through to the session, and the typed
error for each way a frame can be wrong."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image

from antiphon.gateway.translate.translator import Translator
from antiphon.gateway.translate.video_frames import MAX_FRAME_BYTES, MAX_FRAMES
from tests.gateway import client_events as client


def _image(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(out, format=fmt)
    return out.getvalue()


PNG, JPEG = _image("PNG"), _image("JPEG")


def _append(**fields: Any) -> dict[str, Any]:
    return {"type": "input_audio_buffer.append", "audio": client.b64(b"\x00\x00" * 160), **fields}


def test_frames_ride_the_append_as_their_bytes() -> None:
    data_url = "data:image/png;base64," + client.b64(PNG)
    cmd = Translator().translate(
        _append(video_frames=[client.b64(JPEG), data_url], max_slice_nums=2)
    )
    assert list(cmd.append_audio.video_frames) == [JPEG, PNG]
    assert cmd.append_audio.max_slice_nums == 2
    plain = Translator().translate(_append())
    assert not plain.append_audio.video_frames and plain.append_audio.max_slice_nums == 0


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({"video_frames": client.b64(PNG)}, "invalid_value", "video_frames"),
        (
            {"video_frames": [client.b64(PNG)] * (MAX_FRAMES + 1)},
            "too_many_video_frames",
            "video_frames",
        ),
        ({"video_frames": [client.b64(PNG), 7]}, "invalid_value", "video_frames[1]"),
        ({"video_frames": ["not base64!"]}, "invalid_image", "video_frames[0]"),
        ({"video_frames": [client.b64(b"GIF89a" + bytes(64))]}, "invalid_image", "video_frames[0]"),
        (
            {"video_frames": [client.b64(JPEG + bytes(MAX_FRAME_BYTES))]},
            "video_frame_too_large",
            "video_frames[0]",
        ),
        (
            {"video_frames": [client.b64(PNG)], "max_slice_nums": 0},
            "invalid_value",
            "max_slice_nums",
        ),
        ({"max_slice_nums": 10}, "invalid_value", "max_slice_nums"),
        ({"max_slice_nums": "2"}, "invalid_value", "max_slice_nums"),
    ],
)
def test_a_bad_frame_is_refused_with_a_typed_error(
    fields: dict[str, Any], code: str, param: str
) -> None:
    err = client.refused(_append(**fields))
    assert (err.type, err.code, err.param) == ("invalid_request_error", code, param)
