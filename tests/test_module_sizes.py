"""No hand-written Python module is over 500 lines (issue 28).

A module past that size has always turned out to hold several jobs; split it
by what each part owns. Generated stubs (`*_pb2.py`, `*_pb2_grpc.py`) are
protoc's and do not count.
"""

from __future__ import annotations

import subprocess
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
