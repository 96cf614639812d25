"""`launcher.signal_state.SignalState`: the first signal raises, later ones only call the
registered functions (a second Ctrl-C must never raise into the shutdown). End to end, with
real signals to a real launcher: tests/launcher/test_launcher.py and tests/launcher/test_signal_masked.py."""

from __future__ import annotations

import signal

import pytest
from torch.distributed.elastic.multiprocessing.api import SignalException

from relaunch.launcher.signal_state import SignalState


def test_first_signal_raises_later_ones_only_call_on_later() -> None:
    state, calls = SignalState(), []
    state.on_later.append(lambda: calls.append("abandon"))
    assert state.first() is None
    with pytest.raises(SignalException) as info:
        state.handle(signal.SIGTERM, None)
    assert info.value.sigval == signal.SIGTERM and calls == []
    state.handle(signal.SIGINT, None)  # no exception
    assert calls == ["abandon"] and state.first() == signal.SIGTERM
    assert state.received == [signal.SIGTERM, signal.SIGINT]
    state.clear()
    assert state.first() is None and state.on_later  # registrations are the caller's to undo


def test_install_replaces_and_returns_the_previous_handlers() -> None:
    state = SignalState()
    before = signal.getsignal(signal.SIGHUP)
    previous = state.install()
    try:
        assert signal.getsignal(signal.SIGHUP) == state.handle
        assert previous[signal.SIGHUP] == before
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
