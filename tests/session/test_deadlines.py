"""A session's deadlines: its age from its open, its idle lease from the
client's last word; a zero turns either off."""

from __future__ import annotations

import time

from antiphon.session.actor.deadlines import Deadlines


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_idle_lease_runs_from_the_clients_last_word() -> None:
    clock = Clock()
    d = Deadlines(0, max_duration_s=0, idle_ttl_s=10, monotonic=clock)
    clock.now += 9
    d.touch()
    clock.now += 9
    assert d.passed() is None
    clock.now += 2
    assert d.passed() == "idle_ttl_expired"


def test_the_age_counts_from_the_open_whatever_the_client_does() -> None:
    opened_ms = int(time.time() * 1000) - 61_000
    d = Deadlines(opened_ms, max_duration_s=60, idle_ttl_s=300)
    d.touch()
    assert d.passed() == "max_duration_expired"
    assert Deadlines(opened_ms, max_duration_s=120, idle_ttl_s=300).passed() is None


def test_zero_means_no_limit() -> None:
    clock = Clock()
    d = Deadlines(1, max_duration_s=0, idle_ttl_s=0, monotonic=clock)
    clock.now += 1e9
    assert d.passed() is None


def test_expires_at_is_the_open_plus_the_age_limit_and_zero_without_one() -> None:
    """What a client is told of its session's end (GPT-Live's `expires_at`)."""
    assert Deadlines(1_000_000, max_duration_s=60, idle_ttl_s=0).expires_at_s == 1060
    assert Deadlines(1_000_000, max_duration_s=0, idle_ttl_s=0).expires_at_s == 0
    assert Deadlines(0, max_duration_s=60, idle_ttl_s=0).expires_at_s == 0
