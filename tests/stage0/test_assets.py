"""Stage0 assets: prepared once, located without work, missing ones named with their fix."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from antiphon.common.assets import PREPARE_COMMAND, MissingAssetError
from antiphon.stage0 import assets as stage0_assets
from antiphon.stage0.assets import CorruptPackageError, Stage0Assets, locate, prepare
from antiphon.stage0.backends.cascade.llm import llm_models
from antiphon.stage0.backends.cascade.llm.cpu_choice import choose_for
from antiphon.stage0.backends.cascade.llm.llm_models import GgufPart, PackagedLlm
from antiphon.stage0.settings import Stage0Settings


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
    stamps = {p: p.stat().st_mtime_ns for p in (assets.whisper_dir, Path(assets.llm_model))}

    def no_build(target: Path, build: object) -> None:
        raise AssertionError(f"prepared {target} again")

    monkeypatch.setattr(stage0_assets, "_build_atomically", no_build)
    settings = Stage0Settings()
    engine = choose_for(settings).engine
    again = prepare(model_cache, settings.llm_model, engine)
    # Nothing rebuilt: same folders, untouched, no conversion started.
    assert again == assets == locate(model_cache, settings.llm_model, engine)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert not [p for p in model_cache.iterdir() if p.name.startswith(".")]
    assert (assets.whisper_dir / "model.bin").stat().st_size > 100_000_000
    assert assets.vad_onnx.name == "silero_vad.onnx"


# ------------------------------------------------------------------ the LLM
def _fake_model(root: Path, chunks: list[bytes], name: str = "fake-llm") -> PackagedLlm:
    """Installed part packages `fakeparts{i}` (importable from `root`) holding `chunks`."""
    parts = []
    for i, chunk in enumerate(chunks, start=1):
        data = root / f"fakeparts{i}" / "data"
        data.mkdir(parents=True)
        (data.parent / "__init__.py").write_text("")
        (data / f"part{i:02d}.bin").write_bytes(chunk)
        parts.append(GgufPart(f"fakeparts{i}", f"fake-parts{i}", f"data/part{i:02d}.bin"))
    joined = b"".join(chunks)
    return PackagedLlm(
        name=name,
        title="Fake LLM",
        version="1.0",
        parts=tuple(parts),
        size=len(joined),
        sha256=hashlib.sha256(joined).hexdigest(),
        part_size=len(chunks[0]),
    )


@pytest.fixture
def parts_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_parts_are_joined_in_order_and_checked(parts_root: Path, tmp_path: Path) -> None:
    model = _fake_model(parts_root, [b"a" * 8, b"b" * 8, b"c" * 3])
    out = tmp_path / "joined.gguf"
    stage0_assets.join_gguf(model, out)
    assert out.read_bytes() == b"a" * 8 + b"b" * 8 + b"c" * 3


def test_a_part_of_the_wrong_size_names_its_package(parts_root: Path, tmp_path: Path) -> None:
    model = _fake_model(parts_root, [b"a" * 8, b"b" * 8, b"c" * 3])
    (parts_root / "fakeparts2" / "data" / "part02.bin").write_bytes(b"b" * 5)
    with pytest.raises(CorruptPackageError, match=r"fake-parts2 1\.0: .*5 bytes, not 8"):
        stage0_assets.join_gguf(model, tmp_path / "joined.gguf")


def test_a_checksum_mismatch_names_the_packages_and_how_to_reinstall(
    parts_root: Path, tmp_path: Path
) -> None:
    model = _fake_model(parts_root, [b"a" * 8, b"b" * 8])
    (parts_root / "fakeparts1" / "data" / "part01.bin").write_bytes(b"x" * 8)
    with pytest.raises(CorruptPackageError) as caught:
        stage0_assets.join_gguf(model, tmp_path / "joined.gguf")
    message = str(caught.value)
    assert "fake-parts1, fake-parts2 1.0" in message and model.sha256 in message
    assert "--force-reinstall --no-deps fake-parts1==1.0 fake-parts2==1.0" in message


def test_a_missing_part_package_names_the_command_that_installs_it(parts_root: Path) -> None:
    model = _fake_model(parts_root, [b"a" * 8, b"b" * 8])
    missing = replace(model, parts=(*model.parts, GgufPart("nosuchpart3", "no-such-part3", "x")))
    with pytest.raises(MissingAssetError, match="no-such-part3") as caught:
        stage0_assets.join_gguf(missing, parts_root / "joined.gguf")
    assert "make models LLM_MODEL=fake-llm" in str(caught.value)


def _fake_convert(gguf: Path, out: Path) -> None:
    """Stands in for transformers: writes the folder vLLM would load."""
    for name in ("config.json", "tokenizer_config.json", "tokenizer.json"):
        (out / name).write_text("{}")
    (out / "model.safetensors").write_bytes(gguf.read_bytes())


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A model cache whose Whisper folder is already prepared."""
    whisper = tmp_path / "cache" / stage0_assets.WHISPER_DIRNAME
    whisper.mkdir(parents=True)
    for name in ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt"):
        (whisper / name).write_text("x")
    return whisper.parent


def test_prepare_converts_the_checked_gguf_and_records_its_source(
    parts_root: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _fake_model(parts_root, [b"a" * 8, b"b" * 4])
    monkeypatch.setitem(llm_models.CATALOGUE, model.name, model)
    monkeypatch.setattr(stage0_assets, "_convert_gguf", _fake_convert)
    prepared = prepare(cache, model.name)
    folder = cache / model.dirname
    assert prepared.llm_model == str(folder) == locate(cache, model.name).llm_model
    assert (folder / "model.safetensors").read_bytes() == b"a" * 8 + b"b" * 4
    assert sorted(p.name for p in folder.iterdir()) == [
        "antiphon-source.json",
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]


def test_llamacpp_gets_the_checked_gguf_as_it_is_with_its_tokenizer_and_no_conversion(
    parts_root: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _fake_model(parts_root, [b"a" * 8, b"b" * 4])
    monkeypatch.setitem(llm_models.CATALOGUE, model.name, model)

    def no_convert(gguf: Path, out: Path) -> None:
        raise AssertionError("llama.cpp runs the GGUF: nothing to convert")

    def tokenizer(folder: Path) -> None:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (folder / name).write_text("{}")

    monkeypatch.setattr(stage0_assets, "_convert_gguf", no_convert)
    monkeypatch.setattr(stage0_assets, "_save_gguf_tokenizer", tokenizer)
    prepared = prepare(cache, model.name, "llamacpp")
    folder = cache / model.gguf_dirname
    assert prepared.llm_model == str(folder) == locate(cache, model.name, "llamacpp").llm_model
    assert (folder / stage0_assets.GGUF_FILE).read_bytes() == b"a" * 8 + b"b" * 4
    assert not (cache / model.dirname).exists()
    # vLLM's folder is another asset: not there until prepared for vLLM.
    with pytest.raises(MissingAssetError):
        locate(cache, model.name, "vllm")


def test_a_corrupt_package_stops_prepare_before_converting_and_leaves_nothing(
    parts_root: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _fake_model(parts_root, [b"a" * 8, b"b" * 4])
    (parts_root / "fakeparts2" / "data" / "part02.bin").write_bytes(b"z" * 4)
    monkeypatch.setitem(llm_models.CATALOGUE, model.name, model)

    def no_convert(gguf: Path, out: Path) -> None:
        raise AssertionError("converted a GGUF that failed its check")

    monkeypatch.setattr(stage0_assets, "_convert_gguf", no_convert)
    with pytest.raises(CorruptPackageError, match="fake-parts1, fake-parts2"):
        prepare(cache, model.name)
    assert sorted(p.name for p in cache.iterdir()) == [stage0_assets.WHISPER_DIRNAME]


def test_a_folder_made_from_other_weights_is_not_located(
    parts_root: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _fake_model(parts_root, [b"a" * 8])
    monkeypatch.setitem(llm_models.CATALOGUE, model.name, model)
    monkeypatch.setattr(stage0_assets, "_convert_gguf", _fake_convert)
    prepare(cache, model.name)
    source = cache / model.dirname / "antiphon-source.json"
    source.write_text(json.dumps({"gguf_sha256": "0" * 64}))
    with pytest.raises(MissingAssetError, match="made from other weights"):
        locate(cache, model.name)


def test_a_local_folder_is_used_as_it_is_and_must_look_like_a_model(
    cache: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    with pytest.raises(MissingAssetError, match=r"config\.json"):
        locate(cache, str(folder))
    for name in ("config.json", "tokenizer_config.json"):
        (folder / name).write_text("{}")
    assert locate(cache, str(folder)).llm_model == str(folder)


def test_a_model_id_goes_to_vllm_unchanged(cache: Path) -> None:
    assert locate(cache, "Qwen/Qwen2.5-7B-Instruct").llm_model == "Qwen/Qwen2.5-7B-Instruct"


@pytest.mark.parametrize("model", list(llm_models.CATALOGUE.values()), ids=lambda m: m.name)
def test_every_catalogue_model_pins_whole_parts(model: PackagedLlm) -> None:
    sizes = model.part_sizes()
    assert sum(sizes) == model.size and 0 < sizes[-1] <= model.part_size
    assert all(req.endswith(f"=={model.version}") for req in model.requirements())
    assert len(model.sha256) == 64 and llm_models.packaged(model.name) is model
    assert llm_models.local_folder(model.name) is None


def test_the_default_model_is_in_the_catalogue() -> None:
    assert llm_models.packaged(llm_models.DEFAULT_LLM) is llm_models.QWEN_CODER_15B
