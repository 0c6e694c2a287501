"""Settings every service shares, and what the process does with them at start."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from antiphon.common import bootstrap, config
from antiphon.common.config import ServiceSettings


@pytest.fixture
def interval() -> Iterator[float]:
    before = sys.getswitchinterval()
    yield before
    sys.setswitchinterval(before)


def test_the_gil_switch_interval_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, interval: float
) -> None:
    monkeypatch.setenv("ANTIPHON_GIL_SWITCH_INTERVAL_MS", "0.5")
    settings = config.load(ServiceSettings)
    assert settings.gil_switch_interval_ms == 0.5
    bootstrap.configure_interpreter(settings)
    assert sys.getswitchinterval() == pytest.approx(0.0005)


def test_an_unset_switch_interval_leaves_pythons_own(interval: float) -> None:
    bootstrap.configure_interpreter(config.load(ServiceSettings))
    assert sys.getswitchinterval() == interval


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_switch_interval_below_zero_or_at_it_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ANTIPHON_GIL_SWITCH_INTERVAL_MS", value)
    with pytest.raises(ValidationError, match="gil_switch_interval_ms"):
        config.load(ServiceSettings)
