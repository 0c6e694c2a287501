"""Grafana dashboards query only metrics the services really export, and the
metrics reference (docs/metrics.md) lists every metric they export."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
from prometheus_client.parser import text_string_to_metric_families
from stack import LocalStack

from tests.deploy.tools import REPO
from tests.support.realtime import one_turn
from tests.support.speech import silence

DASHBOARDS = sorted((REPO / "deploy" / "grafana" / "dashboards").glob("*.json"))
METRICS_DOC = REPO / "docs" / "metrics.md"
# Series Prometheus makes itself for every target; no service exports them.
PROMETHEUS_OWN = {"up"}
# The sample names each metric type exposes (prometheus_client's text format).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "unknown": ("",),
}
# Grafana's variables, replaced by something PromQL parses.
GRAFANA_VARS = re.compile(r"\$(__rate_interval|__interval|__range)|\$\{[^}]+\}|\$\w+")


def load(path: Path) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(path.read_text())
    return board


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold their panels


def queries(board: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in panels(board) for t in p.get("targets", []) if t.get("expr")]
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            q = var.get("query")
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return exprs


def _grafana_free(expr: str) -> str:
    def sub(m: re.Match[str]) -> str:
        return "5m" if m.group(1) else "x"

    # label_values(metric, label) is Grafana's, not PromQL: keep the metric.
    expr = re.sub(r"label_values\((.*?),\s*\w+\)", r"\1", expr)
    return GRAFANA_VARS.sub(sub, expr)


def metric_names(expr: str) -> set[str]:
    """Every metric name a PromQL expression reads (parsed, not pattern-matched)."""
    names: set[str] = set()

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        return True

    promql_parser.walk(promql_parser.parse(_grafana_free(expr)), visit)
    return names


def exported_samples(text: str) -> dict[str, str]:
    """Sample name -> family name for everything a /metrics page declares, samples or not."""
    families = list(text_string_to_metric_families(text))
    names = {f.name for f in families}
    out = {}
    for family in families:
        base = family.name.removesuffix("_created")
        if base != family.name and base in names:
            continue  # the text format declares a counter's `_created` as a gauge of its own
        for suffix in SUFFIXES.get(family.type, ("",)):
            out[family.name + suffix] = family.name
    return out


def test_metric_names_are_read_from_the_parsed_query() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le) (rate(a_seconds_bucket{job=~"x"}[$__rate_interval])))'
        ' / on() group_left sum(b_total) + label_replace(c, "d", "$1", "e", "(.*)")'
    )
    assert metric_names(expr) == {"a_seconds_bucket", "b_total", "c"}
    assert metric_names("label_values(antiphon_stage0_sessions_active, instance)") == {
        "antiphon_stage0_sessions_active"
    }


def test_dashboards_are_well_formed() -> None:
    assert {p.name for p in DASHBOARDS} >= {
        "antiphon-overview.json",
        "antiphon-tiers.json",
        "antiphon-workers.json",
    }
    uids = [load(p)["uid"] for p in DASHBOARDS]
    assert len(set(uids)) == len(uids)
    for path in DASHBOARDS:
        board = load(path)
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        ids = [p["id"] for p in panels(board)]
        assert len(set(ids)) == len(ids), path.name
        for panel in panels(board):
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == "${datasource}", (path.name, panel["title"])
            assert panel["targets"], (path.name, panel["title"])
        for expr in queries(board):
            assert metric_names(expr), (path.name, expr)  # parses, and reads something


def test_overview_shows_sessions_errors_and_latency_percentiles() -> None:
    exprs = " ".join(queries(load(REPO / "deploy/grafana/dashboards/antiphon-overview.json")))
    assert "antiphon_session_sessions_active" in exprs
    assert "antiphon_session_errors_total" in exprs
    for quantile in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({quantile}," in exprs


@pytest.fixture(scope="module")
async def scraped(synthetic_stack: LocalStack) -> dict[str, dict[str, str]]:
    """Each service's /metrics after one spoken turn went through the stack."""
    await one_turn(synthetic_stack.ports.gateway, silence(600))
    p = synthetic_stack.ports
    pages = {
        "gateway": f"http://127.0.0.1:{p.gateway}/metrics",
        "session": f"http://127.0.0.1:{p.session_metrics}/metrics",
        "stage0": f"http://127.0.0.1:{p.stage0_metrics}/metrics",
        "stage1": f"http://127.0.0.1:{p.stage1_metrics}/metrics",
    }
    return {
        service: exported_samples(await asyncio.to_thread(fetch, url))
        for service, url in pages.items()
    }


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


@pytest.mark.stack
def test_every_metric_a_dashboard_queries_is_exported_by_a_running_service(
    scraped: dict[str, dict[str, str]],
) -> None:
    exported = {name for samples in scraped.values() for name in samples}
    missing: dict[str, list[str]] = {}
    for path in DASHBOARDS:
        for expr in queries(load(path)):
            for name in metric_names(expr) - exported - PROMETHEUS_OWN:
                missing.setdefault(name, []).append(path.name)
    assert not missing, f"queried but not exported: {missing}"
    # The turn really went through: the response-scoped histograms have samples.
    assert "antiphon_stage0_ttft_seconds_bucket" in scraped["stage0"]
    assert "antiphon_stage1_first_audio_seconds_bucket" in scraped["stage1"]


@pytest.mark.stack
def test_each_service_exports_only_its_own_prefix(scraped: dict[str, dict[str, str]]) -> None:
    for service, samples in scraped.items():
        for family in set(samples.values()):
            if family.startswith("antiphon_"):
                assert family.startswith(f"antiphon_{service}_"), (service, family)


@pytest.mark.stack
def test_metrics_reference_lists_every_exported_metric(
    scraped: dict[str, dict[str, str]],
) -> None:
    doc = METRICS_DOC.read_text()
    documented = set(re.findall(r"`(antiphon_[a-z0-9_]+)`", doc))
    names: dict[str, set[str]] = {}
    for samples in scraped.values():
        for sample, family in samples.items():
            names.setdefault(family, {family}).add(sample)
    missing = {
        family
        for family, samples in names.items()
        if family.startswith("antiphon_") and not samples & documented
    }
    assert not missing, f"exported but not in docs/metrics.md: {sorted(missing)}"
