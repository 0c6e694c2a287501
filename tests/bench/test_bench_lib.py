"""bench.lib's small owners: percentiles, the duplex URL, atomic results files."""

from __future__ import annotations

import json
from pathlib import Path

from bench.lib.realtime import duplex_url
from bench.lib.results import write_json
from bench.lib.stats import pct


def test_pct_interpolates_rounds_and_is_none_for_no_values() -> None:
    assert pct([10.0, 20.0], 50) == 15.0
    assert pct([0.0, 10.0], 12.34, digits=1) == 1.2
    assert pct([], 50) is None


def test_duplex_url_keeps_a_further_query_and_opts_in_once() -> None:
    assert duplex_url(8080) == "ws://127.0.0.1:8080/v1/realtime?duplex=1"
    assert duplex_url(8080, "?autostart=0&duplex=0") == (
        "ws://127.0.0.1:8080/v1/realtime?autostart=0&duplex=1"
    )


def test_write_json_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "deeper" / "level.json"
    write_json(out, {"levels": [1]})
    write_json(out, {"levels": [1, 2]})
    assert json.loads(out.read_text()) == {"levels": [1, 2]}
    assert [p.name for p in out.parent.iterdir()] == ["level.json"]
