"""bench/results/ holds only the current numbers: at most 30 files, each listed in
MANIFEST.md (its command, commit and device) and cited by a doc (README.md or
docs/*.md), and every bench/results file a doc cites is there."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
MANIFEST = RESULTS / "MANIFEST.md"
MOST = 30
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
# A path under bench/results/ in a doc; a name with <, { or * is a pattern, not a file.
CITED = re.compile(r"bench/results/([A-Za-z0-9_./-]+)(?![<{*A-Za-z0-9_./-])")
# Named by docs as what a run writes, not as kept numbers: `make bench` writes it,
# `make soak` reads it (and stops, saying so, where it is not there).
OUTPUTS = {"load-cascade.json"}
# A file name a doc gives alone, in a row or beside a section's bench/results/ mention.
NAMED = re.compile(r"`([A-Za-z0-9_./-]+\.(?:json|txt|png))`")


def kept() -> list[str]:
    return sorted(
        str(p.relative_to(RESULTS)) for p in RESULTS.rglob("*") if p.is_file() and p != MANIFEST
    )


def listed() -> set[str]:
    rows = re.findall(r"^\| `([^`]+)` \|", MANIFEST.read_text(), re.MULTILINE)
    return set(rows)


def cited_paths() -> set[str]:
    """Every file a doc names as bench/results/NAME."""
    found: set[str] = set()
    for doc in DOCS:
        for name in CITED.findall(doc.read_text()):
            name = name.rstrip(".,)")
            if name and not name.endswith("/"):
                found.add(name)
    return found


def named_anywhere() -> str:
    return "\n".join(doc.read_text() for doc in DOCS)


def test_at_most_thirty_files_the_manifest_included() -> None:
    assert len(kept()) + 1 <= MOST, kept()


def test_every_kept_file_is_in_the_manifest_and_the_manifest_names_no_other() -> None:
    assert sorted(set(kept()) - listed()) == []
    assert sorted(listed() - set(kept())) == []


def test_every_kept_file_is_cited_by_a_doc() -> None:
    text = named_anywhere()
    uncited = [
        name for name in kept() if f"bench/results/{name}" not in text and f"`{name}`" not in text
    ]
    assert uncited == []


def test_every_bench_results_file_a_doc_cites_is_there() -> None:
    missing = sorted(
        name for name in cited_paths() if not (RESULTS / name).is_file() and name not in OUTPUTS
    )
    assert missing == []


def test_every_file_a_performance_row_names_is_there() -> None:
    text = (REPO / "docs" / "performance.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    named = {n for row in rows for n in NAMED.findall(row)}
    assert named, "docs/performance.md names no result file in a row"
    assert sorted(n for n in named if not (RESULTS / n).is_file()) == []
