"""Worker of tests/checkpoint/test_checkpoint_staging.py: one rank (gloo, real DCP) and async staging.

Each case makes the staging of a save still in flight when the state is changed, without
relying on timing: a task submitted first to the stager's one staging thread holds it, so
the save's copy is queued behind it; the first step pre-hook (registered before the
manager's guard) checks that the staging has not run, then lets it go; a hook registered
after the guard's records whether the staging was finished when the guard let the step
through. Then the checkpoint is loaded and compared with the values before the change.

Cases: `optimizer` (guard(opt), `opt.step()` right after `save_async`), `second` (a
second save started while the first one's write is in flight, then a step), `module`
(guard(model) with BatchNorm: a forward right after `save_async` changes the running
statistics in place), `unguarded` (the guard removed: `save_async` returns staged) and
`bad_guard` (guard() of something else: a one-line CheckpointError).
Prints one JSON object of what it saw on its last line.
"""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from relaunch.checkpoint import CheckpointError, CheckpointManager, load
from tests.workers.ckpt_common import start_alone


def _hold(mgr: CheckpointManager) -> threading.Event:
    """Occupy the stager's staging thread until the returned event is set."""
    executor = mgr._stager._staging_executor  # DCP's DefaultStager: one worker thread
    assert executor is not None, "DefaultStager without a staging thread"
    gate = threading.Event()
    executor.submit(gate.wait)
    return gate


def _staged(rec: Any) -> bool:
    """Whether DCP's staging future of the save record `rec` is finished."""
    return rec.staging is not None and rec.staging.done()


def _clone(sd: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in sd.items()}


def _loads_as(path: Path, expected: dict[str, torch.Tensor]) -> bool:
    target = {k: torch.zeros_like(v) for k, v in expected.items()}
    load(target, path)
    return all(torch.equal(target[k], expected[k]) for k in expected)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    a = p.parse_args()
    start_alone()
    root = Path(a.root)
    out: dict[str, Any] = {}
    torch.manual_seed(0)
    try:
        mgr = CheckpointManager(root / "persistent", report=False, keep=0)
        # no BatchNorm here: a forward would change its running statistics, which the
        # optimizer's guard does not cover (the module case below guards the forward)
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 8))
        opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        handle = mgr.guard(opt)
        seen: dict[str, bool] = {}

        def before_guard(*_: Any) -> None:  # registered first: runs before the guard's
            rec = mgr.last
            seen["in_flight_at_step"] = rec is not None and not _staged(rec)
            if gates:
                gates.pop().set()

        def after_guard(*_: Any) -> None:  # runs after the guard let the step through
            rec = mgr.last
            seen["staged_before_step"] = rec is not None and _staged(rec)

        gates: list[threading.Event] = []
        # the guard's hook is already registered: move the checks around it
        handle.remove()
        h_before = opt.register_step_pre_hook(before_guard)
        handle = mgr.guard(opt)
        h_after = opt.register_step_pre_hook(after_guard)

        def train_step() -> None:
            x = torch.randn(32, 256)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

        train_step()  # momentum buffers exist: the optimizer's state is saved too

        # -- optimizer: opt.step() right after save_async -----------------------------
        def state() -> dict[str, Any]:
            return {**model.state_dict(), **{f"opt.{k}": v for k, v in _opt_state().items()}}

        def _opt_state() -> dict[str, torch.Tensor]:
            return {
                f"{i}": opt.state[p]["momentum_buffer"]
                for i, p in enumerate(opt.param_groups[0]["params"])
            }

        before = _clone(state())
        gates.append(_hold(mgr))
        call_s = mgr.save_async(state(), 1)
        rec1 = mgr.last
        assert rec1 is not None
        out["optimizer_returned_before_staged"] = not _staged(rec1)
        train_step()  # changes parameters and momentum buffers in place
        out["optimizer_seen"] = dict(seen)
        out["optimizer_changed_live"] = not all(
            torch.equal(before[k], v) for k, v in _clone(state()).items()
        )
        done = mgr.wait()
        assert done is not None
        out["optimizer_outcome"] = done.outcome
        out["optimizer_blocked"] = [call_s, done.blocked_s]
        out["optimizer_checkpoint_pre_step"] = _loads_as(
            root / "persistent" / "step_000000001", before
        )

        # -- second: a save while the first one's write is in flight -------------------
        seen.clear()
        before2 = _clone(state())
        mgr.save_async(state(), 2)
        rec2 = mgr.last
        gates.append(_hold(mgr))  # save 3's staging is held (save 2's has already run)
        mgr.save_async(state(), 3)  # waits for save 2's write: the buffers are reused
        rec3 = mgr.last
        assert rec2 is not None and rec3 is not None and rec3 is not rec2
        assert rec2.future is not None
        out["second_prev_written_first"] = rec2.future.done() and not _staged(rec3)
        train_step()
        out["second_seen"] = dict(seen)
        done = mgr.wait()
        assert done is rec3 and rec2.outcome == "committed"
        out["second_outcomes"] = [rec2.outcome, rec3.outcome]
        out["second_checkpoints"] = [
            _loads_as(root / "persistent" / "step_000000002", before2),
            _loads_as(root / "persistent" / "step_000000003", before2),
        ]

        # -- module: a forward right after save_async (BatchNorm's running statistics) --
        h_before.remove()
        h_after.remove()
        handle.remove()
        seen.clear()
        model = nn.Sequential(nn.Linear(256, 512), nn.BatchNorm1d(512), nn.Linear(512, 8))
        model.register_forward_pre_hook(before_guard)
        mhandle = mgr.guard(model)
        model.register_forward_pre_hook(after_guard)
        before4 = _clone(model.state_dict())
        gates.append(_hold(mgr))
        mgr.save_async(model.state_dict(), 4)
        with torch.no_grad():
            model(torch.randn(32, 256) + 3.0)  # train mode: running_mean moves in place
        out["module_seen"] = dict(seen)
        out["module_changed_live"] = not torch.equal(
            before4["1.running_mean"], model.state_dict()["1.running_mean"]
        )
        done = mgr.wait()
        assert done is not None
        out["module_checkpoint_pre_forward"] = _loads_as(
            root / "persistent" / "step_000000004", before4
        )
        mhandle.remove()
        mhandle.remove()  # idempotent

        # -- unguarded: save_async returns staged ------------------------------------
        live = {"w": torch.full((256, 1024), 5.0)}
        mgr.save_async(live, 5)
        rec5 = mgr.last
        assert rec5 is not None
        out["unguarded_staged_on_return"] = _staged(rec5)
        live["w"].fill_(99.0)
        mgr.wait()
        out["unguarded_checkpoint"] = _loads_as(
            root / "persistent" / "step_000000005", {"w": torch.full((256, 1024), 5.0)}
        )
        out["wait_staged_idle"] = mgr.wait_staged()

        # -- bad input ----------------------------------------------------------------
        errors = []
        for bad in ((), ("an optimizer",)):
            try:
                mgr.guard(*bad)  # type: ignore[arg-type]
            except CheckpointError as exc:
                errors.append(str(exc))
        out["bad_guard"] = errors
        mgr.close()
    finally:
        dist.destroy_process_group()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
