"""Per-key limits: sessions at once and a token bucket of opens, per key."""

from __future__ import annotations

import pytest

from antiphon.gateway.edge.key_limits import KeyLimits, LimitExceeded


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_concurrent_sessions_are_capped_per_key_and_freed_by_release() -> None:
    limits = KeyLimits(max_sessions=2)
    a, b = limits.admit("k1"), limits.admit("k1")
    with pytest.raises(LimitExceeded) as refused:
        limits.admit("k1")
    assert refused.value.code == "key_session_limit"
    limits.admit("k2")  # another key has its own count
    a.release()
    a.release()  # idempotent: a double release frees one slot, not two
    assert limits.active("k1") == 1
    limits.admit("k1")
    with pytest.raises(LimitExceeded):
        limits.admit("k1")
    b.release()
    assert limits.active("k1") == 1


def test_opens_per_second_are_a_token_bucket_per_key() -> None:
    clock = Clock()
    limits = KeyLimits(opens_per_s=2.0, burst=3, clock=clock)
    for _ in range(3):
        limits.admit("k").release()
    with pytest.raises(LimitExceeded) as refused:
        limits.admit("k")
    assert refused.value.code == "key_rate_limit"
    limits.admit("other").release()
    clock.now += 0.5  # one token back at 2 per second
    limits.admit("k").release()
    with pytest.raises(LimitExceeded):
        limits.admit("k")
    clock.now += 60.0  # refills to the burst, never beyond it
    for _ in range(3):
        limits.admit("k").release()
    with pytest.raises(LimitExceeded):
        limits.admit("k")


def test_the_default_burst_is_one_second_of_opens_and_at_least_one() -> None:
    clock = Clock()
    limits = KeyLimits(opens_per_s=0.5, clock=clock)
    limits.admit("k").release()
    with pytest.raises(LimitExceeded):
        limits.admit("k")


def test_a_session_refused_for_concurrency_spends_no_open() -> None:
    clock = Clock()
    limits = KeyLimits(max_sessions=1, opens_per_s=1.0, burst=2, clock=clock)
    held = limits.admit("k")
    for _ in range(5):
        with pytest.raises(LimitExceeded, match="sessions open"):
            limits.admit("k")
    held.release()
    limits.admit("k").release()  # the bucket still had its second token


def test_zero_means_no_limit() -> None:
    limits = KeyLimits()
    leases = [limits.admit("k") for _ in range(1000)]
    assert limits.active("k") == 1000
    for lease in leases:
        lease.release()
    assert limits.active("k") == 0
