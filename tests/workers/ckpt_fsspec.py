"""Worker of tests/checkpoint/test_checkpoint_fsspec.py: one rank (gloo) with an fsspec persistent tier.

`--mode file`: the persistent tier is a `file://` URL and there is no local tier, so DCP's
background writer process writes through `FsspecWriter` and the commit runs through
fsspec. `--mode memory`: the persistent tier is `memory://` (this process's memory), the
local tier a folder; each checkpoint is drained into memory and committed there.
Prints one JSON object of what it saw on its last line.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import fsspec
import torch
import torch.distributed as dist

from relaunch.checkpoint import (
    CheckpointCorrupted,
    CheckpointError,
    CheckpointManager,
    latest_complete,
    load,
)
from tests.workers.ckpt_common import start_alone


def state(step: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((256, 1024), float(step)), "b": torch.arange(1000) * float(step)}


def equal(a: dict[str, torch.Tensor], step: float) -> bool:
    return all(torch.equal(a[k], v) for k, v in state(step).items())


def torn_copies(fs: Any, root: str, good: str) -> None:
    """Two torn step folders next to the good one: step 8 has every file but no marker (a
    commit stopped before its last write); step 9 has the marker but a truncated file."""
    for step in (8, 9):
        dst = f"{root}/step_{step:09d}"
        fs.makedirs(dst, exist_ok=True)
        for e in fs.ls(good, detail=True):
            name = e["name"].rstrip("/").rsplit("/", 1)[1]
            data = fs.cat_file(e["name"])
            if name == "COMMITTED":
                if step == 8:
                    continue
                rec = json.loads(data)
                rec["step"] = step
                data = json.dumps(rec).encode()
            elif step == 9 and name.endswith(".distcp"):
                data = data[: len(data) // 2]
            fs.pipe_file(f"{dst}/{name}", data)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("file", "memory"), required=True)
    p.add_argument("--root", required=True)
    a = p.parse_args()
    start_alone()
    root = Path(a.root)
    out: dict[str, Any] = {}
    try:
        if a.mode == "file":
            url = f"file://{root / 'persistent'}"
            local = None
        else:
            url = "memory://relaunch-test/ckpt"
            local = root / "local"
            try:
                CheckpointManager(url, report=False)
            except CheckpointError as exc:
                out["memory_without_local"] = str(exc)
        mgr = CheckpointManager(url, local_dir=local, report=False, keep=0)
        for step in (1, 2):
            mgr.save_async(state(step), step)
            rec = mgr.wait()
            assert rec is not None
            out[f"outcome_{step}"] = rec.outcome
            persistent = rec.persistent if local is not None else rec.info
            out[f"persistent_{step}"] = persistent.location if persistent else None
        fs, path = fsspec.core.url_to_fs(url)
        good = f"{path.rstrip('/')}/step_000000002"
        out["files_2"] = sorted(
            e["name"].rstrip("/").rsplit("/", 1)[1] for e in fs.ls(good, detail=True)
        )
        out["leftovers"] = sorted(
            e["name"].rstrip("/").rsplit("/", 1)[1]
            for e in fs.ls(path, detail=True)
            if e["name"].rstrip("/").rsplit("/", 1)[1].startswith(".")
        )
        torn_copies(fs, path.rstrip("/"), good)
        info = latest_complete(url)
        out["latest"] = info.step if info else None
        target = state(0)
        load(target, info.location if info else url)
        out["load_equal_2"] = equal(target, 2)
        if local is not None:
            shutil.rmtree(local)  # the node's local tier is gone: only the memory:// one
            local.mkdir()
        target = state(0)
        got = mgr.load_latest(target)
        out["load_latest"] = [got.step if got else None, mgr.restored_tier, equal(target, 2)]
        mgr.close()
        # a flipped byte in one file of the newest checkpoint: named at load
        name = next(n for n in out["files_2"] if n.endswith(".distcp"))
        data = bytearray(fs.cat_file(f"{good}/{name}"))
        data[len(data) // 2] ^= 0xFF
        fs.pipe_file(f"{good}/{name}", bytes(data))
        try:
            load(state(0), fs.unstrip_protocol(good))
        except CheckpointCorrupted as exc:
            out["corrupted"] = str(exc)
    finally:
        dist.destroy_process_group()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
