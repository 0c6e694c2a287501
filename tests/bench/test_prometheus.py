"""bench.lib.prometheus: what a level's two scrapes of a worker say."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from bench.lib.machine import free_port
from bench.lib.prometheus import (
    histogram_quantile,
    metric_sum,
    scrape,
    seconds_histogram_ms,
    step_window,
)


def test_histogram_quantile_interpolates_within_the_bucket_that_holds_it() -> None:
    # 10 samples <= 0.05, 10 more in (0.05, 0.1]: the median is the first bucket's bound,
    # the 75th percentile halfway through the second.
    buckets = {0.05: 10.0, 0.1: 20.0, float("inf"): 20.0}
    assert histogram_quantile(buckets, 0.5) == pytest.approx(0.05)
    assert histogram_quantile(buckets, 0.75) == pytest.approx(0.075)


def test_histogram_quantile_in_the_inf_bucket_is_the_largest_finite_bound() -> None:
    assert histogram_quantile({0.1: 1.0, float("inf"): 10.0}, 0.99) == 0.1
    assert histogram_quantile({0.1: 0.0, float("inf"): 0.0}, 0.5) is None


def test_step_window_counts_only_the_window_and_sums_over_labels() -> None:
    name = "step_seconds"
    before = {
        f'{name}_bucket{{le="0.05",row="a"}}': 100.0,
        f'{name}_bucket{{le="+Inf",row="a"}}': 100.0,
        f'{name}_count{{row="a"}}': 100.0,
        f'{name}_sum{{row="a"}}': 2.0,
    }
    after = {
        f'{name}_bucket{{le="0.05",row="a"}}': 100.0,
        f'{name}_bucket{{le="+Inf",row="a"}}': 104.0,
        f'{name}_bucket{{le="0.05",row="b"}}': 0.0,
        f'{name}_bucket{{le="+Inf",row="b"}}': 4.0,
        f'{name}_count{{row="a"}}': 104.0,
        f'{name}_count{{row="b"}}': 4.0,
        f'{name}_sum{{row="a"}}': 2.4,
        f'{name}_sum{{row="b"}}': 0.4,
    }
    window = step_window(before, after, name)
    # Eight steps in the window, all past 50 ms (the earlier 100 do not count).
    assert window["count"] == 8
    assert window["mean"] == pytest.approx(100.0)
    assert window["p50"] == 50.0
    assert metric_sum(after, f"{name}_count") == 108.0


def test_seconds_histogram_ms_gives_the_bounds_of_its_upper_quantiles() -> None:
    name = "lag_seconds"
    after = {
        f'{name}_bucket{{le="0.001"}}': 96.0,
        f'{name}_bucket{{le="0.01"}}': 99.0,
        f'{name}_bucket{{le="+Inf"}}': 100.0,
        f"{name}_count": 100.0,
        f"{name}_sum": 0.2,
    }
    out = seconds_histogram_ms({}, after, name)
    assert out == {"count": 100, "mean": 2.0, "p95_at_most": 1.0, "p99_at_most": 10.0}


@pytest.fixture
def metrics_ports() -> Iterator[list[int]]:
    """Two front ends' metrics endpoints, each counting one sample of its own."""
    servers = []
    for value in ("3", "4"):
        body = f"# HELP x\nrequests_total {value}\nbroken_line nan-ish\n".encode()

        class Handler(BaseHTTPRequestHandler):
            payload = body

            def do_GET(self) -> None:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(self.payload)

            def log_message(self, *args: object) -> None:
                pass

        server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
        servers.append(server)
    yield [s.server_address[1] for s in servers]
    for s in servers:
        s.shutdown()
        s.server_close()


def test_scrape_sums_over_front_ends_and_skips_one_that_does_not_answer(
    metrics_ports: list[int],
) -> None:
    samples = scrape([*metrics_ports, free_port()])
    assert samples == {"requests_total": 7.0}
