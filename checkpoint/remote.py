"""A persistent tier behind an fsspec URL (`file://`, `memory://`, `s3://`, ...).

The same layout as a local tier (`layout`): a checkpoint is a `step_<N>/` folder with the
marker `COMMITTED` (step, world size, every file's size and CRC-32) and is complete only
when the marker is readable and every file it names is there with the recorded size. An
object store has no atomic rename of a folder, so the commit does not rely on one:

1. the files are written under a temporary name `.partial-step_<N>-<token>/` (DCP's
   `FsspecWriter`, or the drain from the local tier);
2. a folder already at `step_<N>` (the same step saved again) first loses its marker, so
   it stops being a checkpoint before anything of it changes, and is removed;
3. the folder is moved to `step_<N>` (a rename on a local file system, copy and delete on
   an object store) and every file is checked to be there with its recorded size;
4. the marker is written last, as one object (`pipe_file`; on a local file system a
   temporary name, fsync and rename): the one step that makes the checkpoint visible.

A commit interrupted anywhere leaves a folder without a valid marker, which
`latest_complete` skips; the next manager removes leftover temporary folders. With the
`file` protocol every file and folder is also fsynced before the marker is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import zlib
from pathlib import Path
from typing import Any

from fsspec.core import url_to_fs

from .layout import (
    _CHUNK,
    _FINAL,
    MARKER,
    METADATA,
    CheckpointCorrupted,
    CheckpointError,
    CheckpointInfo,
    final_name,
    fsync_dir,
    parse_marker,
)


def is_url(root: str | os.PathLike[str]) -> bool:
    """True when `root` names an fsspec location (`protocol://...`), not a plain path."""
    return "://" in str(root)


class UrlTier:
    """One tier behind an fsspec URL: its file system, root path and the commit protocol."""

    def __init__(self, url: str) -> None:
        self.url = str(url)
        try:
            self.fs, self.root = url_to_fs(self.url)
        except (ValueError, ImportError) as exc:
            raise CheckpointError(f"unusable checkpoint URL {self.url}: {exc}") from None
        protocol = self.fs.protocol
        self.protocol = protocol if isinstance(protocol, str) else protocol[0]
        self.root = self.root.rstrip("/") or "/"

    # -- names ------------------------------------------------------------------------
    def join(self, *names: str) -> str:
        return posixpath.join(self.root, *names)

    def url_of(self, path: str) -> str:
        """The URL of a path of this tier (what DCP's fsspec reader/writer take)."""
        return str(self.fs.unstrip_protocol(path))

    @property
    def local(self) -> bool:
        """The `file` protocol: a local (or mounted) file system, fsynced like a path tier."""
        return self.protocol in ("file", "local")

    # -- listing ----------------------------------------------------------------------
    def _sizes(self, folder: str) -> dict[str, int]:
        try:
            entries = self.fs.ls(folder, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        return {
            posixpath.basename(e["name"].rstrip("/")): int(e.get("size") or 0)
            for e in entries
            if e.get("type") == "file"
        }

    def _dirs(self) -> list[str]:
        try:
            entries = self.fs.ls(self.root, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [e["name"].rstrip("/") for e in entries if e.get("type") == "directory"]

    def mkdir(self) -> None:
        self.fs.makedirs(self.root, exist_ok=True)

    def remove_partials(self, keep: str | None = None) -> None:
        """Remove leftover temporary folders of saves that never committed."""
        for d in self._dirs():
            name = posixpath.basename(d)
            if name.startswith((".partial-", ".old-")) and name != keep:
                self.rm(d)

    def rm(self, folder: str) -> None:
        try:
            self.fs.rm(folder, recursive=True)
        except FileNotFoundError:
            return

    def rank_files(self, folder: str, rank: int) -> list[str]:
        """The DCP files rank `rank` wrote into `folder` (rank 0 also owns `.metadata`)."""
        sizes = self._sizes(folder)
        names = sorted(n for n in sizes if n.startswith(f"__{rank}_") and n.endswith(".distcp"))
        if rank == 0 and METADATA in sizes:
            names.append(METADATA)
        return names

    def crc32(self, path: str) -> int:
        crc = 0
        with self.fs.open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                crc = zlib.crc32(chunk, crc)
        return crc & 0xFFFFFFFF

    def file_record(self, folder: str, name: str) -> dict[str, int]:
        path = f"{folder}/{name}"
        return {"size": int(self.fs.size(path)), "crc32": self.crc32(path)}

    # -- the commit -------------------------------------------------------------------
    def _fsync_local(self, folder: str) -> None:
        for name in self._sizes(folder):
            fd = os.open(f"{folder}/{name}", os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(folder))

    def _write_marker(self, folder: str, data: bytes) -> None:
        path = f"{folder}/{MARKER}"
        if self.local:
            tmp = f"{folder}/.{MARKER}.tmp"
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            fsync_dir(Path(folder))
        else:
            self.fs.pipe_file(path, data)  # one object: there whole or not at all

    def commit(self, partial: str, final: str, record: dict[str, Any]) -> None:
        """Move `partial` to `final` and write the marker last (module docstring)."""
        if self.fs.exists(final):
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(f"{final}/{MARKER}")
            self.rm(final)
        self.fs.mv(partial, final, recursive=True)
        sizes = self._sizes(final)
        for name, f in record["files"].items():
            if sizes.get(name) != int(f["size"]):
                raise CheckpointError(
                    f"checkpoint file {self.url_of(final + '/' + name)} is missing or has "
                    f"{sizes.get(name)} bytes after the move, {f['size']} expected"
                )
        if self.local:
            self._fsync_local(final)
            fsync_dir(Path(self.root))
        self._write_marker(final, json.dumps(record, sort_keys=True).encode())
        if self.local:
            fsync_dir(Path(self.root))

    def put(self, local: Path, partial: str, names: list[str]) -> int:
        """Copy `names` from the local folder `local` into `partial`; bytes copied."""
        self.fs.makedirs(partial, exist_ok=True)
        total = 0
        for name in names:
            with open(local / name, "rb") as fi, self.fs.open(f"{partial}/{name}", "wb") as fo:
                while chunk := fi.read(_CHUNK):
                    fo.write(chunk)
                    total += len(chunk)
        if self.local:
            self._fsync_local(partial)
        return total

    # -- reading ----------------------------------------------------------------------
    def read_marker(self, folder: str) -> CheckpointInfo | None:
        name = posixpath.basename(folder.rstrip("/"))
        parsed = parse_marker(name, lambda: bytes(self.fs.cat_file(f"{folder}/{MARKER}")))
        if parsed is None:
            return None
        return CheckpointInfo(Path(folder), *parsed, url=self.url_of(folder))

    def complete(self) -> list[CheckpointInfo]:
        found = [self.read_marker(d) for d in self._dirs() if _FINAL.match(posixpath.basename(d))]
        return sorted((i for i in found if i is not None), key=lambda i: i.step)

    def latest_complete(self) -> CheckpointInfo | None:
        """The newest checkpoint whose marker is valid and whose files are all there with
        the recorded sizes; never a torn one."""
        for info in reversed(self.complete()):
            sizes = self._sizes(str(info.path))
            if all(sizes.get(n) == f["size"] for n, f in info.files.items()):
                return info
        return None

    def final(self, step: int) -> str:
        return self.join(final_name(step))

    def verify(self, info: CheckpointInfo) -> None:
        """Every file's size and CRC-32; CheckpointCorrupted names the bad file."""
        folder = str(info.path)
        sizes = self._sizes(folder)
        for name, f in sorted(info.files.items()):
            where = self.url_of(f"{folder}/{name}")
            if name not in sizes:
                raise CheckpointCorrupted(f"checkpoint file missing: {where}")
            if sizes[name] != f["size"]:
                raise CheckpointCorrupted(
                    f"checkpoint file {where} is corrupted: {sizes[name]} bytes, the marker "
                    f"recorded {f['size']}"
                )
            crc = self.crc32(f"{folder}/{name}")
            if crc != f["crc32"]:
                raise CheckpointCorrupted(
                    f"checkpoint file {where} is corrupted: crc32 {crc:08x}, the marker "
                    f"recorded {f['crc32']:08x}"
                )

    def prune(self, keep: int) -> list[int]:
        """Remove all but the newest `keep` complete checkpoints (marker first, so a
        half-removed folder is never taken for a checkpoint)."""
        if keep <= 0:
            return []
        removed = []
        for info in self.complete()[:-keep]:
            folder = str(info.path)
            try:
                self.fs.rm(f"{folder}/{MARKER}")
            except FileNotFoundError:
                continue
            self.rm(folder)
            removed.append(info.step)
        return removed
