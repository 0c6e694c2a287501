"""The event catalogue of `reference/realtime-duplex-api.md`, read from the document itself.

Tests compare the gateway against what the reference says rather than against
a copy of it, so a change to the contract shows up as a failing diff.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The two upstream documents, kept in the repository (docs/reference) so a
# fresh clone tests against the same contract it implements.
_CANDIDATES = (REPO / "docs" / "reference",)
API = "realtime-duplex-api.md"
RUNTIME = "fullduplex-runtime-design.md"
_CODE = re.compile(r"`([^`]+)`")


@cache
def document(name: str) -> str:
    override = os.environ.get("ANTIPHON_REFERENCE_DIR")
    folders = (Path(override),) if override else _CANDIDATES
    for folder in folders:
        if (folder / name).is_file():
            return (folder / name).read_text(encoding="utf-8")
    pytest.fail(f"reference document {name} not found in {[str(f) for f in folders]}")


def _section(text: str, heading: str) -> str:
    """From `heading` to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    ends = [
        m.start() for m in re.finditer(r"\n(#+) ", text[start:]) if len(m.group(1)) <= len(level)
    ]
    return text[start : start + ends[0]] if ends else text[start:]


def _first_cells(section: str) -> list[list[str]]:
    """The code spans of each table row's first cell (header and rule skipped)."""
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [_CODE.findall(row.split("|")[1]) for row in rows[1:] if not set(row) <= set("|- ")]


def _catalogue() -> str:
    return _section(document(API), "### Event catalogue")


def client_types() -> list[str]:
    """The client -> server catalogue (21 types)."""
    return [c[0] for c in _first_cells(_section(_catalogue(), "#### Client to server")) if c]


# OpenAI GA server events the catalogue lacks that an issue asked us to send
# (partial transcripts, issue 26), each with its tier: OpenAI's own ("1").
# tests/gateway/test_ga_events.py holds each to the stock SDK's model. And
# the duplex extension that answers a GPT-Live context append (issue 49),
# which the duplex dialect projects as it projects every kind ("3").
BEYOND_CATALOGUE = {
    "conversation.item.input_audio_transcription.delta": "1",
    "session.context.appended": "3",
}


def server_types() -> list[str]:
    """The server -> client catalogue (42 types)."""
    return [c[0] for c in _first_cells(_section(_catalogue(), "#### Server to client")) if c]


def server_tiers() -> dict[str, str]:
    """Server type -> its tier: "1" OpenAI's, "2" OpenAI's with extensions, "3"
    duplex only; with the types we send beyond the catalogue."""
    section = _section(_catalogue(), "#### Server to client")
    rows = [line.split("|") for line in section.splitlines() if line.startswith("| `")]
    return {_CODE.findall(r[1])[0]: r[2].strip() for r in rows} | BEYOND_CATALOGUE


def aliases() -> list[str]:
    """The input aliases the catalogue lists beside its client table."""
    match = re.search(r"Aliases \(([^)]*)\)", _catalogue())
    assert match, "the catalogue's alias list moved"
    return _CODE.findall(match.group(1))


def alias_table() -> dict[str, str]:
    """Alias -> canonical type, from the normative contract's alias table."""
    section = _section(document(RUNTIME), "### Normative Realtime event contract")
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| Canonical input event"))
    out: dict[str, str] = {}
    for line in lines[first + 2 :]:
        if not line.startswith("| `"):
            break
        cells = line.split("|")
        for alias in _CODE.findall(cells[2]):
            out[alias] = _CODE.findall(cells[1])[0]
    return out


def native_map() -> list[tuple[list[str], list[str]]]:
    """(native names, Realtime projection names) per row of the name map."""
    section = _section(document(API), "#### Native to Realtime name map")
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    # "(with `audio_transcript`)" names a field of the native event, not an event.
    natives = [re.sub(r"\(with [^)]*\)", "", r.split("|")[1]) for r in rows]
    return [
        (_CODE.findall(n), _CODE.findall(r.split("|")[2]))
        for n, r in zip(natives, rows, strict=True)
    ]
