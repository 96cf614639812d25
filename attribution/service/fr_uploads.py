"""Flight Recorder dumps sent to the service: where they are stored and how they are written.

`save(files, dest_dir)` writes the parts of one upload into a fresh folder of the service's
own (`dest_dir` must not exist: a bad upload never overwrites stored dumps), each as a new
file opened with O_EXCL | O_NOFOLLOW under a sanitized name; on any error the folder is
removed. `cycle_dir` is where a cycle's dumps live under the service's data dir;
`node_dirs` lists the folders a multi-node cycle's launchers uploaded into
(`POST /v1/jobs/{job}/cycles/{n}/nodes/{node}/fr`), which `attribution.service.gather`
reads, bounded, when it analyses the cycle over all nodes.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from pathlib import Path

from fastapi import UploadFile

from relaunch.attribution.core.files import safe_name

UPLOAD_CHUNK = 1 << 20
MAX_FR_FILES = 8192
NODES = "nodes"  # subfolder of a cycle's dumps: one folder per node upload


def cycle_dir(data_dir: str | Path, job_id: str, cycle: int) -> Path:
    return Path(data_dir) / "fr" / safe_name(job_id) / f"cycle_{cycle}"


def node_upload_dir(data_dir: str | Path, job_id: str, cycle: int, node: str) -> Path:
    """A fresh folder for one upload of `node`'s dumps (its name: the node id with any
    character outside [A-Za-z0-9._] replaced, then `-<ns>`)."""
    name = re.sub(r"[^A-Za-z0-9._]", "_", node)[:64]
    return cycle_dir(data_dir, job_id, cycle) / NODES / f"{name}-{time.time_ns()}"


def node_dirs(data_dir: str | Path, job_id: str, cycle: int) -> list[Path]:
    """The folders of the cycle's node uploads, oldest first (never a link)."""
    base = cycle_dir(data_dir, job_id, cycle) / NODES
    try:
        found = [p for p in base.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.name)


async def save(files: list[UploadFile], dest_dir: Path) -> list[Path]:
    """Write the parts of one upload into the new folder `dest_dir`; the paths written."""
    await asyncio.to_thread(dest_dir.mkdir, parents=True, exist_ok=False)
    paths: list[Path] = []
    try:
        for i, up in enumerate(files):
            name = os.path.basename(up.filename or "") or f"dump_{i}"
            name = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:128].lstrip(".") or f"dump_{i}"
            if any(p.name == name for p in paths):
                name = f"dup{i}-{name}"  # two parts with one name: keep both
            target = dest_dir / name
            # a new file in the fresh directory: never follows or reuses anything there
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(target, flags, 0o600), "wb") as out:
                while chunk := await up.read(UPLOAD_CHUNK):
                    await asyncio.to_thread(out.write, chunk)
            paths.append(target)
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, dest_dir, True)
        raise
    return paths
