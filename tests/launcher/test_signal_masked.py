"""A signal that torch elastic's metrics wrapper masks is still the signal (`signal_behind`).

Seen in CI: Ctrl-C landed on `start = time.time()` inside `@prof`'s `try`, before `start` was
bound; the wrapper's `finally` raised UnboundLocalError, which replaced the SignalException
(kept only as its `__context__`), and the launcher exited 1 instead of 130. Here the signal
is raised at exactly that statement, through torch's own wrapper, with no timing involved.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest
import torch.distributed.elastic.metrics.api as metrics_api
from torch.distributed.elastic.multiprocessing.api import SignalException

from relaunch.launcher.agent import signal_behind


class _SignalOnFirstTime:
    """Stands in for the `time` module inside torch's metrics wrapper: the first `time()`
    call is where the signal lands."""

    def __init__(self) -> None:
        self.calls = 0

    def time(self) -> float:
        self.calls += 1
        if self.calls == 1:
            raise SignalException("process 1 got signal 2", signal.SIGINT)
        return 0.0


def test_the_signal_masked_by_torchs_metrics_wrapper_is_found(monkeypatch: Any) -> None:
    monkeypatch.setattr(metrics_api, "time", _SignalOnFirstTime())

    @metrics_api.prof
    def monitor() -> None:
        raise AssertionError("never reached: the signal lands before the call")

    with pytest.raises(UnboundLocalError) as info:  # torch's wrapper masks the signal
        monitor()
    sig = signal_behind(info.value)
    assert sig is not None and sig.sigval == signal.SIGINT


def test_a_signal_itself_and_an_unrelated_error() -> None:
    direct = SignalException("process 1 got signal 15", signal.SIGTERM)
    assert signal_behind(direct) is direct
    try:
        try:
            raise ValueError("first")
        except ValueError as inner:
            raise RuntimeError("second") from inner
    except RuntimeError as outer:
        assert signal_behind(outer) is None  # a real error stays an error


def test_a_chain_that_loops_back_ends() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__context__, b.__context__ = b, a
    assert signal_behind(a) is None
