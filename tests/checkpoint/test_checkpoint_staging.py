"""Async staging of relaunch.checkpoint: the state may change only after its staging copy.

A real rank (gloo, world 1, real DCP with its spawned writer process) in a subprocess
(tests/workers/ckpt_staging.py). With `guard(optimizer)`, `save_async` returns while the
staging copy is still queued (held behind a task on the stager's one thread, so nothing
depends on timing); `optimizer.step()` right after it waits in the guard's step pre-hook
until the copy is done, then changes parameters and momentum buffers in place, and the
checkpoint holds the values from before the step. The same for a second save started
while the first one is still writing, and for `guard(module)` with BatchNorm (a forward
changes its running statistics in place). The wait counts as the save's blocked time.
Without a guard `save_async` returns staged. Bad input to `guard()` gets a one-line error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "workers" / "ckpt_staging.py"


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("staging")
    r = subprocess.run(
        [sys.executable, str(WORKER), "--root", str(tmp)],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out: dict = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def test_an_optimizer_step_right_after_save_async_cannot_change_the_checkpoint(seen: dict) -> None:
    # save_async returned with the staging copy still to run (held on the stager's thread)
    assert seen["optimizer_returned_before_staged"] is True
    # the step began with the staging in flight; the guard let it through only once done
    assert seen["optimizer_seen"] == {"in_flight_at_step": True, "staged_before_step": True}
    assert seen["optimizer_changed_live"] is True  # the step did change the live state
    assert seen["optimizer_outcome"] == "committed"
    assert seen["optimizer_checkpoint_pre_step"] is True  # params + momentum before the step


def test_the_guards_wait_is_the_saves_blocked_time(seen: dict) -> None:
    call_s, blocked_s = seen["optimizer_blocked"]
    # blocked_s = the time in save_async plus the guard's wait for the staging copy
    assert 0.0 <= call_s < blocked_s


def test_a_second_save_waits_for_the_first_write_and_both_hold_their_state(seen: dict) -> None:
    assert seen["second_prev_written_first"] is True  # the reused buffers were free first
    assert seen["second_seen"] == {"in_flight_at_step": True, "staged_before_step": True}
    assert seen["second_outcomes"] == ["committed", "committed"]
    assert seen["second_checkpoints"] == [True, True]


def test_a_guarded_module_waits_before_a_forward_that_changes_buffers(seen: dict) -> None:
    assert seen["module_seen"] == {"in_flight_at_step": True, "staged_before_step": True}
    assert seen["module_changed_live"] is True  # BatchNorm's running_mean moved in place
    assert seen["module_checkpoint_pre_forward"] is True


def test_without_a_guard_save_async_returns_staged(seen: dict) -> None:
    assert seen["unguarded_staged_on_return"] is True
    assert seen["unguarded_checkpoint"] is True  # a fill_ right after it changed nothing
    assert seen["wait_staged_idle"] == 0.0  # nothing in flight: no wait


def test_guard_of_nothing_or_of_something_else_is_a_one_line_error(seen: dict) -> None:
    assert seen["bad_guard"] == [
        "guard() needs an optimizer or a module to guard",
        "guard() takes optimizers and modules, not str",
    ]
