"""Stage0 assets: prepared once, located without work, missing ones named with their fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from antiphon.common.assets import PREPARE_COMMAND, MissingAssetError
from antiphon.stage0 import assets as stage0_assets
from antiphon.stage0.assets import Stage0Assets, locate, prepare


def test_locate_on_empty_dir_raises_naming_the_prepare_command(tmp_path: Path) -> None:
    with pytest.raises(MissingAssetError) as caught:
        locate(tmp_path)
    message = str(caught.value)
    assert PREPARE_COMMAND in message
    assert "Whisper" in message


def test_locate_names_the_missing_file_of_a_half_made_folder(tmp_path: Path) -> None:
    whisper = tmp_path / stage0_assets.WHISPER_DIRNAME
    whisper.mkdir()
    (whisper / "config.json").write_text("{}")
    with pytest.raises(MissingAssetError, match=r"model\.bin"):
        locate(tmp_path)


def test_failed_build_leaves_neither_target_nor_staging(tmp_path: Path) -> None:
    def broken(out: Path) -> None:
        (out / "partial").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        stage0_assets._build_atomically(tmp_path / "thing", broken)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.models
def test_prepare_is_idempotent_and_locate_agrees(
    model_cache: Path, assets: Stage0Assets, monkeypatch: pytest.MonkeyPatch
) -> None:
    stamps = {p: p.stat().st_mtime_ns for p in (assets.whisper_dir, assets.llm_dir)}

    def no_build(target: Path, build: object) -> None:
        raise AssertionError(f"prepared {target} again")

    monkeypatch.setattr(stage0_assets, "_build_atomically", no_build)
    again = prepare(model_cache)
    # Nothing rebuilt: same folders, untouched, no conversion started.
    assert again == assets == locate(model_cache)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert not [p for p in model_cache.iterdir() if p.name.startswith(".")]
    assert (assets.whisper_dir / "model.bin").stat().st_size > 100_000_000
    assert assets.vad_onnx.name == "silero_vad.onnx"
