"""No hand-written Python module is over 500 lines (issue 28).

A module past that size has always turned out to hold several jobs; split it
by what each part owns. Generated stubs (`*_pb2.py`, `*_pb2_grpc.py`) are
protoc's and do not count.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 500
FOLDERS = ("services", "client", "tests", "bench", "deploy")


def hand_written_modules() -> list[Path]:
    # Files git tracks, and new ones it does not ignore: a module written but
    # not yet committed counts too, so the check fails before the commit does.
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *FOLDERS],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    paths = {REPO / name for name in listed.split("\0") if name.endswith(".py")}
    # A file deleted in the work tree is still listed until the deletion is committed.
    return sorted(p for p in paths if "_pb2" not in p.name and p.is_file())


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_listing_finds_the_modules_and_leaves_out_the_stubs() -> None:
    modules = hand_written_modules()
    assert Path(__file__).resolve() in modules
    assert REPO / "services" / "common" / "antiphon" / "common" / "audio_formats.py" in modules
    assert not [p for p in modules if "_pb2" in p.name]
    assert (REPO / "services" / "common" / "antiphon" / "v1" / "stage_pb2.py").is_file()


def test_no_hand_written_module_is_over_500_lines() -> None:
    sizes = {p: line_count(p) for p in hand_written_modules()}
    over = sorted(((n, p) for p, n in sizes.items() if n > MAX_LINES), reverse=True)
    assert not over, f"modules over {MAX_LINES} lines (split them by what each part owns):\n" + (
        "\n".join(f"  {p.relative_to(REPO)}: {n}" for n, p in over)
    )


MAX_SIDE_BY_SIDE = 20


def test_no_service_folder_holds_more_than_20_modules_side_by_side() -> None:
    """A tier's package is grouped into subpackages by what each part owns
    (issue 46): no folder under services/ holds more than 20 modules beside
    each other (package markers, `__init__.py`, do not count)."""
    per_folder = Counter(
        p.parent.relative_to(REPO).as_posix()
        for p in hand_written_modules()
        if p.relative_to(REPO).parts[0] == "services" and p.name != "__init__.py"
    )
    assert per_folder["services/gateway/antiphon/gateway"] > 3, per_folder
    crowded = {folder: n for folder, n in per_folder.items() if n > MAX_SIDE_BY_SIDE}
    assert not crowded, f"over {MAX_SIDE_BY_SIDE} modules side by side (group them): {crowded}"
