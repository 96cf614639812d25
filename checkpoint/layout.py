"""Where a checkpoint lives on disk and when it counts as complete (stdlib only).

A tier (the persistent directory, or a node's local directory) holds one folder per
checkpoint. DCP writes into a hidden temporary folder `.partial-step_<N>-<token>`; the
folder is renamed to `step_<N>` only after every rank's part is durable, with the commit
marker `COMMITTED` inside (JSON: step, world size, every file's size and CRC-32). A folder
without a readable marker, or whose files do not match the marker's sizes, is not a
checkpoint: `latest_complete(dir)` skips it, so a save killed at any point leaves the
previous complete checkpoint the newest one found. Every write here is fsynced (file, then
folder) before it is renamed into place.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "COMMITTED"
METADATA = ".metadata"  # DCP's global metadata file (written by rank 0)
_FINAL = re.compile(r"^step_(\d{9})$")
_CHUNK = 8 << 20


class CheckpointError(RuntimeError):
    """A checkpoint cannot be saved or loaded; the message is one line."""


class CheckpointCorrupted(CheckpointError):
    """A file of a checkpoint does not match the checksum its commit marker recorded."""


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint: its folder, step and the marker's record of its files."""

    path: Path
    step: int
    files: dict[str, dict[str, int]]  # name -> {"size": bytes, "crc32": value}
    world_size: int
    url: str = ""  # the checkpoint's URL when its tier is an fsspec URL (checkpoint.remote)

    @property
    def size(self) -> int:
        return sum(int(f["size"]) for f in self.files.values())

    @property
    def location(self) -> str:
        """Where it is: its URL (fsspec tier) or its folder."""
        return self.url or str(self.path)


def final_name(step: int) -> str:
    return f"step_{int(step):09d}"


def partial_name(step: int, token: str) -> str:
    return f".partial-{final_name(step)}-{token}"


def rank_files(folder: Path, rank: int) -> list[str]:
    """The DCP files rank `rank` wrote into `folder` (rank 0 also owns `.metadata`)."""
    names = sorted(p.name for p in folder.glob(f"__{rank}_*.distcp"))
    if rank == 0 and (folder / METADATA).exists():
        names.append(METADATA)
    return names


def crc32_file(path: Path) -> int:
    """CRC-32 of a file, read in 8 MiB chunks (zlib releases the GIL on large buffers)."""
    crc = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc & 0xFFFFFFFF


def file_record(path: Path) -> dict[str, int]:
    return {"size": path.stat().st_size, "crc32": crc32_file(path)}


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically: a temporary name, fsync, rename, fsync the folder."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def copy_durable(src: Path, dst: Path) -> None:
    """Copy a file and fsync the copy (the caller fsyncs the folder once)."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        shutil.copyfileobj(fi, fo, _CHUNK)
        fo.flush()
        os.fsync(fo.fileno())


def commit(partial: Path, final: Path, record: dict[str, Any]) -> Path:
    """Write the marker into `partial` and rename it to `final` (both fsynced).

    A `final` already there (the same step saved again after a restart) is replaced.
    """
    write_durable(partial / MARKER, json.dumps(record, sort_keys=True).encode())
    if final.exists():
        old = final.with_name(f".old-{final.name}-{os.getpid()}")
        os.replace(final, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(partial, final)
    fsync_dir(final.parent)
    return final


def parse_marker(
    name: str, read: Callable[[], bytes]
) -> tuple[int, dict[str, dict[str, int]], int] | None:
    """(step, files, world size) of the checkpoint folder `name` whose marker `read()`
    returns, or None when the name is not a final folder or the marker is unreadable, does
    not name its files and metadata, or is for another step (a local path or a URL)."""
    m = _FINAL.match(name)
    if m is None:
        return None
    try:
        rec = json.loads(read().decode("utf-8"))
        files = {
            str(k): {"size": int(v["size"]), "crc32": int(v["crc32"])}
            for k, v in rec["files"].items()
        }
        step, world = int(rec["step"]), int(rec["world_size"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if step != int(m.group(1)) or METADATA not in files:
        return None
    return step, files, world


def read_marker(folder: Path) -> CheckpointInfo | None:
    """The checkpoint in `folder` if its marker is readable and names its files, else None."""
    parsed = parse_marker(folder.name, (folder / MARKER).read_bytes)
    return None if parsed is None else CheckpointInfo(folder, *parsed)


def present(info: CheckpointInfo, folder: Path | None = None) -> list[str]:
    """The files of `info` present with the recorded size in `folder` (default its own)."""
    base = info.path if folder is None else folder
    out = []
    for name, f in info.files.items():
        try:
            if (base / name).stat().st_size == f["size"]:
                out.append(name)
        except OSError:
            continue
    return out


def complete(root: str | os.PathLike[str]) -> list[CheckpointInfo]:
    """Every committed checkpoint under `root`, oldest step first (markers only)."""
    base = Path(root)
    try:
        entries = list(base.iterdir())
    except OSError:
        return []
    found = [read_marker(p) for p in entries if _FINAL.match(p.name) and p.is_dir()]
    return sorted((i for i in found if i is not None), key=lambda i: i.step)


def latest_complete(root: str | os.PathLike[str]) -> CheckpointInfo | None:
    """The newest checkpoint under `root` whose marker is valid and whose files are all
    there with the recorded sizes; never a torn one (None when there is none). `root` may
    be an fsspec URL (`file://...`, `memory://...`: checkpoint.remote)."""
    if "://" in str(root):
        from .remote import UrlTier

        return UrlTier(str(root)).latest_complete()
    for info in reversed(complete(root)):
        if len(present(info)) == len(info.files):
            return info
    return None


def verify(folder: Path, info: CheckpointInfo) -> None:
    """Check every file's size and CRC-32; a mismatch raises CheckpointCorrupted naming
    the file (one line)."""
    for name, f in sorted(info.files.items()):
        path = folder / name
        try:
            size = path.stat().st_size
        except OSError:
            raise CheckpointCorrupted(f"checkpoint file missing: {path}") from None
        if size != f["size"]:
            raise CheckpointCorrupted(
                f"checkpoint file {path} is corrupted: {size} bytes, the marker recorded {f['size']}"
            )
        crc = crc32_file(path)
        if crc != f["crc32"]:
            raise CheckpointCorrupted(
                f"checkpoint file {path} is corrupted: crc32 {crc:08x}, the marker recorded {f['crc32']:08x}"
            )


def remove_partials(root: Path, keep: str | None = None) -> None:
    """Remove leftover temporary folders of saves that never committed."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for p in entries:
        if p.name.startswith((".partial-", ".restore-", ".old-")) and p.name != keep:
            shutil.rmtree(p, ignore_errors=True)


def prune(root: Path, keep: int) -> list[int]:
    """Remove all but the newest `keep` complete checkpoints of `root` (each renamed to a
    hidden name first, so a half-removed folder is never taken for a checkpoint); returns
    the steps removed. `keep` <= 0 keeps everything."""
    if keep <= 0:
        return []
    removed = []
    for info in complete(root)[:-keep]:
        old = info.path.with_name(f".old-{info.path.name}-{os.getpid()}")
        try:
            os.replace(info.path, old)
        except OSError:
            continue
        shutil.rmtree(old, ignore_errors=True)
        removed.append(info.step)
    return removed
