"""`CheckpointManager`: asynchronous, atomic, tiered checkpoints on torch.distributed.checkpoint.

One manager per rank, made by every rank in the same order (its constructor is
collective). `save_async(state_dict, step)` stages the state into shared-memory buffers
that are allocated once and reused (DCP's `DefaultStager`: device tensors copied to host,
CPU tensors copied too, so the next optimizer step cannot change the checkpoint); the
write runs in DCP's persistent background process (`async_save` with
`AsyncCheckpointerType.PROCESS`: spawned once, serves every save, one gloo group of its
own). The staging runs on the stager's thread: without a guard `save_async` waits for it
and returns staged; with `guard(optimizer)` it returns once staging has started and the
optimizer's next `step()` waits for it (a step pre-hook), so the copy overlaps the
forward and backward passes; the wait counts as the save's blocked time. A finisher
thread per save then makes the checkpoint visible atomically:

1. each rank checksums the files it wrote (CRC-32) and posts them with a `done` count in
   the job's c10d store;
2. rank 0 decides once, with a compare-and-set on the save's state key, `commit` when every
   rank is done, unless a rank already set `aborted` (`abort()`) or `failed`;
3. on commit the temporary folder is renamed to `step_<N>` with the marker
   `COMMITTED` (files, sizes, checksums) inside, fsynced (`layout.commit`); the user's
   `on_finalize(info)` runs once on every rank, then the completion is reported to the
   launcher (`relaunch.client.report_checkpoint`).

With `local_dir` (node-local storage) the save goes there first, each rank's files are
replicated to `replicas` peer nodes before the local commit, and then drained to the
persistent tier, which commits the same way. `load_latest(state_dict)` restores the newest
complete checkpoint of either tier, completing a node's local folder from its peers'
replicas when it lost it, after checking every file's checksum.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

from . import tiers
from .layout import (
    MARKER,
    CheckpointError,
    CheckpointInfo,
    commit,
    complete,
    file_record,
    final_name,
    latest_complete,
    partial_name,
    present,
    prune,
    rank_files,
    read_marker,
    remove_partials,
    verify,
    write_durable,
)
from .remote import UrlTier, is_url

ENV_RESUME = "RELAUNCH_RESUME_CHECKPOINT"  # set by the launcher for a restarted cycle
_POLL_S = 0.02  # how often rank 0's finisher looks at the store while waiting for ranks


@dataclass
class _Save:
    step: int
    token: str
    started: float
    partial: Path  # the folder this node's ranks write into (local or persistent tier)
    url_partial: str = ""  # with a URL persistent tier and no local one: its path there
    future: Future[Any] | None = None  # DCP's write (upload) finished
    staging: Future[Any] | None = None  # the copy into the staging buffers finished
    staging_waited: bool = False  # save_async or wait_staged saw the staging finish
    blocked_s: float = 0.0  # in save_async, plus any wait for its staging (wait_staged)
    staged_at: float = 0.0  # monotonic: the staging copy finished
    written_at: float = 0.0  # monotonic: the background write (DCP) finished
    committed_at: float = 0.0  # monotonic: visible in its first tier
    done: threading.Event = field(default_factory=threading.Event)
    outcome: str = "pending"  # committed | aborted | failed
    error: BaseException | None = None
    info: CheckpointInfo | None = None
    persistent: CheckpointInfo | None = None
    prev: _Save | None = None  # the save before: its finisher ends before this one's starts


def _staged(rec: _Save) -> None:
    rec.staged_at = rec.staged_at or time.monotonic()


class _Guard:
    """The hooks of one `CheckpointManager.guard()` call; `remove()` takes them away."""

    def __init__(self, mgr: CheckpointManager, handles: list[Any]) -> None:
        self._mgr: CheckpointManager | None = mgr
        self._handles = handles

    def remove(self) -> None:
        """Remove the hooks (idempotent)."""
        if self._mgr is None:
            return
        for h in self._handles:
            h.remove()
        self._mgr._guards -= 1
        self._mgr = None


class CheckpointManager:
    """Async checkpoints of one rank (see the module docstring).

    `persistent_dir`: shared by all nodes. `local_dir`: node-local (optional); its files
    are replicated to `replicas` other nodes and drained to `persistent_dir`.
    `on_finalize(info)`: called once per complete checkpoint on every rank, on the
    finisher thread, after the checkpoint is visible. `process_group`: the job's default
    group when None.
    """

    def __init__(
        self,
        persistent_dir: str | os.PathLike[str],
        *,
        local_dir: str | os.PathLike[str] | None = None,
        replicas: int = 1,
        on_finalize: Callable[[CheckpointInfo], None] | None = None,
        report: bool = True,
        drain: bool = True,
        keep: int = 3,
    ) -> None:
        if not dist.is_initialized():
            raise CheckpointError("CheckpointManager needs torch.distributed initialised first")
        if replicas < 0:
            raise CheckpointError(f"replicas must be >= 0, got {replicas}")
        # an fsspec URL (checkpoint.remote) or a folder all nodes see
        self._url = UrlTier(str(persistent_dir)) if is_url(persistent_dir) else None
        self.persistent = Path(persistent_dir) if self._url is None else Path(self._url.root)
        self.local = Path(local_dir) if local_dir is not None else None
        if self._url is not None and self._url.protocol == "memory" and self.local is None:
            raise CheckpointError(
                "a memory:// persistent tier needs local_dir: DCP's background writer is "
                "another process, and its memory:// is not this process's"
            )
        self.replicas = replicas
        self.on_finalize = on_finalize
        self.report = report
        self.drain = drain
        self.keep = keep
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", self.world))
        if self.local_world <= 0 or self.world % self.local_world:
            self.local_world = self.world
        self.local_rank = self.rank % self.local_world
        self.node = self.rank // self.local_world
        # a gloo group of its own: control traffic and file transfers from finisher threads
        self._pg = dist.new_group(backend="gloo", timeout=timedelta(minutes=30))
        box = [uuid.uuid4().hex[:12] if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, group=self._pg)
        self._nonce = str(box[0])
        store = dist.distributed_c10d._get_default_store()
        self._store = dist.PrefixStore(f"relaunch_ckpt/{self._nonce}/", store)
        cuda = torch.cuda.is_available()
        # async staging: the copy runs on the stager's one thread (DCP's ThreadPoolExecutor;
        # on CPU a plain copy into shared memory, GIL released); save_async waits for it
        # unless a guard (guard()) makes the state's next change wait instead
        self._stager = DefaultStager(StagingOptions(cuda, True, True, cuda))
        self._guards = 0  # guards registered and not removed (guard())
        self._seq = 0
        self._inflight: _Save | None = None
        self.last: _Save | None = None  # the most recent save, finished or not
        self.restored_tier = ""  # after load_latest: local | persistent
        self.restored_from: dict[str, str] = {}  # files a restore received from peers
        if self.rank == 0 and self._url is not None:
            self._url.mkdir()
            self._url.remove_partials()
        elif self.rank == 0:
            self.persistent.mkdir(parents=True, exist_ok=True)
            remove_partials(self.persistent)
        if self.local is not None and self.local_rank == 0:
            self.local.mkdir(parents=True, exist_ok=True)
            remove_partials(self.local)
        dist.barrier(group=self._pg)

    # -- saving -------------------------------------------------------------------
    def save_async(self, state_dict: dict[str, Any], step: int) -> float:
        """Stage `state_dict` and start writing it as checkpoint `step`; returns the seconds
        the caller was blocked in this call (waiting for the previous save's write, then,
        without a guard, for the staging copy).

        With a guard (`guard(optimizer)`) it returns once the staging has started: the
        state must not change until `wait_staged()` (the guard calls it before the
        optimizer's next step); that wait is added to the record's `blocked_s`.

        Collective: every rank calls it with the same step."""
        t0 = time.monotonic()
        if self._inflight is not None:
            # the staging buffers are reused: the previous write must have read them
            prev = self._inflight
            if prev.future is not None:
                with contextlib.suppress(BaseException):  # its finisher records the error
                    prev.future.result()
        self._seq += 1
        token = f"{self._nonce}-{self._seq}"
        root = self.local if self.local is not None else self.persistent
        partial = root / partial_name(step, token)
        rec = _Save(int(step), token, t0, partial, prev=self._inflight)
        writer: dcp.StorageWriter
        if self.local is None and self._url is not None:
            rec.url_partial = self._url.join(partial_name(step, token))
            writer = FsspecWriter(
                self._url.url_of(rec.url_partial), single_file_per_rank=True, sync_files=True
            )
        else:
            partial.mkdir(parents=True, exist_ok=True)
            writer = dcp.FileSystemWriter(str(partial), single_file_per_rank=True, sync_files=True)
        fut = dcp.async_save(
            state_dict,
            storage_writer=writer,
            async_checkpointer_type=dcp.state_dict_saver.AsyncCheckpointerType.PROCESS,
            async_stager=self._stager,
        )
        if isinstance(fut, Future):  # staged synchronously (a stager without a thread)
            rec.future, rec.staged_at, rec.staging_waited = fut, time.monotonic(), True
        else:
            rec.future, rec.staging = fut.upload_completion, fut.staging_completion
            rec.staging.add_done_callback(lambda _f: _staged(rec))
        self._inflight = self.last = rec
        threading.Thread(
            target=self._finish, args=(rec,), name=f"relaunch-ckpt-{step}", daemon=True
        ).start()
        if not self._guards:
            self._wait_staging(rec)  # no guard: return staged, as a synchronous stager
        rec.blocked_s = time.monotonic() - t0
        return rec.blocked_s

    def wait_staged(self) -> float:
        """Wait until the save in flight has finished copying the state into its staging
        buffers (after that the state may change); returns the seconds waited, which are
        added to the save's `blocked_s`. Immediate when no staging is in flight. A staging
        error is not raised here: the save fails and `wait()` raises it."""
        rec = self._inflight
        if rec is None or rec.staging_waited:
            return 0.0
        waited = self._wait_staging(rec)
        rec.blocked_s += waited
        return waited

    @staticmethod
    def _wait_staging(rec: _Save) -> float:
        staging = rec.staging
        if staging is None or rec.staging_waited:
            return 0.0
        t0 = time.monotonic()
        wait_futures([staging])  # never raises: the finisher records a failed save
        rec.staging_waited = True
        now = time.monotonic()
        rec.staged_at = rec.staged_at or now  # the done callback may not have run yet
        return now - t0

    def guard(self, *targets: torch.optim.Optimizer | torch.nn.Module) -> _Guard:
        """Make `save_async` return as soon as staging has started, and each target wait
        for the staging in flight before it changes the state: an optimizer before its
        `step()` (a step pre-hook), a module before its forward (a forward pre-hook: for
        state a forward changes in place, e.g. BatchNorm's running statistics or DDP's
        buffer broadcast). The hooks cost nothing when no staging is in flight. Returns a
        handle; `handle.remove()` removes the hooks (with no guard left, `save_async`
        waits for staging again). Any other in-place change of the saved tensors needs
        `wait_staged()` first."""
        if not targets:
            raise CheckpointError("guard() needs an optimizer or a module to guard")

        def hook(*_args: Any) -> None:
            self.wait_staged()

        handles: list[Any] = []
        for t in targets:
            if isinstance(t, torch.optim.Optimizer):
                handles.append(t.register_step_pre_hook(hook))
            elif isinstance(t, torch.nn.Module):
                handles.append(t.register_forward_pre_hook(hook))
            else:
                for h in handles:
                    h.remove()
                raise CheckpointError(
                    f"guard() takes optimizers and modules, not {type(t).__name__}"
                )
        self._guards += 1
        return _Guard(self, handles)

    def poll(self) -> bool:
        """True when no save is in flight (the last one committed, aborted or failed)."""
        rec = self._inflight
        return rec is None or rec.done.is_set()

    def wait(self, timeout: float | None = None) -> _Save | None:
        """Wait for the save in flight to end (committed, aborted or failed, and for a
        tiered save also drained); returns its record, or None if none. Raises the
        save's error (CheckpointError, one line) when it failed."""
        rec = self._inflight
        if rec is None:
            return None
        if not rec.done.wait(timeout):
            raise CheckpointError(f"checkpoint step {rec.step} still in flight after {timeout} s")
        if rec.error is not None:
            raise CheckpointError(f"checkpoint step {rec.step} failed: {rec.error}") from rec.error
        return rec

    def abort(self) -> bool:
        """Abort the save in flight: True when it will never become visible (its temporary
        folder is removed once the background write has stopped touching it), False when
        there is none or it already committed. Any rank may call it."""
        rec = self._inflight
        if rec is None or rec.done.is_set():
            return False
        won = self._store.compare_set(f"{rec.token}/state", "", "aborted")
        return bytes(won) == b"aborted"

    def close(self) -> None:
        """Wait for the save in flight (errors are not raised here) and free the buffers."""
        rec = self._inflight
        if rec is not None:
            rec.done.wait()
        self._stager.close()

    # -- the finisher (one thread per save) -----------------------------------------
    def _finish(self, rec: _Save) -> None:
        try:
            self._finish_steps(rec)
        except BaseException as exc:  # noqa: BLE001 - recorded for wait()
            rec.error = exc
            rec.outcome = "failed"
            with contextlib.suppress(Exception):
                self._store.compare_set(f"{rec.token}/state", "", "failed")
        finally:
            rec.done.set()

    def _decide(self, rec: _Save) -> str:
        key = f"{rec.token}/state"
        if self.rank == 0:
            while True:
                if self._store.check([key]):
                    break
                if self._store.add(f"{rec.token}/done", 0) >= self.world:
                    self._store.compare_set(key, "", "commit")
                    break
                time.sleep(_POLL_S)
        else:
            self._store.wait([key], timedelta(days=1))
        return bytes(self._store.get(key)).decode()

    def _finish_steps(self, rec: _Save) -> None:
        assert rec.future is not None
        try:
            rec.future.result()
        except BaseException as exc:
            self._store.compare_set(f"{rec.token}/state", "", "failed")
            raise CheckpointError(str(exc).splitlines()[0] if str(exc) else repr(exc)) from exc
        rec.written_at = time.monotonic()
        if rec.prev is not None:
            # finishers run in save order: their transfers share one gloo group, and a
            # checkpoint never becomes visible before an older one
            rec.prev.done.wait()
            rec.prev = None
        url = self._url if rec.url_partial else None
        if url is not None:
            names = url.rank_files(rec.url_partial, self.rank)
            mine = {n: url.file_record(rec.url_partial, n) for n in names}
        else:
            mine = {n: file_record(rec.partial / n) for n in rank_files(rec.partial, self.rank)}
        self._store.set(f"{rec.token}/sums/{self.rank}", json.dumps(mine))
        self._store.add(f"{rec.token}/done", 1)
        state = self._decide(rec)
        if state != "commit":
            rec.outcome = "aborted" if state == "aborted" else "failed"
            if url is not None and self.rank == 0:
                url.rm(rec.url_partial)
            elif url is None and (self.local_rank == 0 or self.local is None):
                shutil.rmtree(rec.partial, ignore_errors=True)
            if state == "failed":
                rec.error = CheckpointError(f"another rank's write of step {rec.step} failed")
            return
        by_rank = {
            r: json.loads(bytes(self._store.get(f"{rec.token}/sums/{r}")))
            for r in range(self.world)
        }
        files = {n: f for r in sorted(by_rank) for n, f in by_rank[r].items()}
        record = {
            "step": rec.step,
            "world_size": self.world,
            "files": files,
            "token": rec.token,
            "time": time.time(),
        }
        if self.local is not None:
            tiers.replicate(
                self._pg,
                rec.partial,
                self.rank,
                self.world,
                self.local_world,
                self.replicas,
                by_rank,
            )
            final = self.local / final_name(rec.step)
            visible = f"{rec.token}/visible/{self.node}"
            if self.local_rank == 0:
                commit(rec.partial, final, record)
                prune(self.local, self.keep)
                self._store.set(visible, "1")
            else:
                self._store.wait([visible], timedelta(days=1))
            tier = "local"
        else:
            final = self.persistent / final_name(rec.step)
            visible = f"{rec.token}/visible"
            if self.rank == 0:
                self._commit_persistent(rec.partial, rec.url_partial, rec.step, record)
                self._store.set(visible, "1")
            else:
                self._store.wait([visible], timedelta(days=1))
            tier = "persistent"
        info = self._read_persistent(rec.step) if tier == "persistent" else read_marker(final)
        if info is None:
            raise CheckpointError(f"committed checkpoint {final} has no readable marker")
        rec.info, rec.outcome = info, "committed"
        rec.committed_at = time.monotonic()
        if self.on_finalize is not None:
            self.on_finalize(info)
        self._report(rec, info, tier)
        if self.local is not None and self.drain:
            self._drain(rec, record, info, by_rank)

    def _drain(
        self, rec: _Save, record: dict[str, Any], info: CheckpointInfo, by_rank: dict[int, Any]
    ) -> None:
        partial = self.persistent / partial_name(rec.step, rec.token)
        url_partial = ""
        if self._url is not None:
            url_partial = self._url.join(partial_name(rec.step, rec.token))
            self._url.put(info.path, url_partial, sorted(by_rank[self.rank]))
        else:
            tiers.drain(info.path, partial, sorted(by_rank[self.rank]))
        self._store.add(f"{rec.token}/drained", 1)
        key = f"{rec.token}/drained_visible"
        if self.rank == 0:
            while self._store.add(f"{rec.token}/drained", 0) < self.world:
                time.sleep(_POLL_S)
            self._commit_persistent(partial, url_partial, rec.step, record)
            self._store.set(key, "1")
        else:
            self._store.wait([key], timedelta(days=1))
        pinfo = self._read_persistent(rec.step)
        if pinfo is not None:
            rec.persistent = pinfo
            self._report(rec, pinfo, "persistent")

    def _commit_persistent(
        self, partial: Path, url_partial: str, step: int, record: dict[str, Any]
    ) -> None:
        """Rank 0: make `step` visible in the persistent tier, then prune it."""
        if self._url is not None:
            self._url.commit(url_partial, self._url.final(step), record)
            self._url.prune(self.keep)
        else:
            commit(partial, self.persistent / final_name(step), record)
            prune(self.persistent, self.keep)

    def _read_persistent(self, step: int) -> CheckpointInfo | None:
        if self._url is not None:
            return self._url.read_marker(self._url.final(step))
        return read_marker(self.persistent / final_name(step))

    def _report(self, rec: _Save, info: CheckpointInfo, tier: str) -> None:
        if not self.report or self.local_rank != 0:
            return
        from relaunch.launcher.client import report_checkpoint

        report_checkpoint(
            step=info.step,
            path=info.location,
            tier=tier,
            size=info.size,
            duration=time.monotonic() - rec.started,
        )

    # -- restoring ------------------------------------------------------------------
    def resume_hint(self) -> str | None:
        """The checkpoint the launcher told this restarted worker to resume from (env)."""
        return os.environ.get(ENV_RESUME) or None

    def load_latest(self, state_dict: dict[str, Any]) -> CheckpointInfo | None:
        """Load the newest complete checkpoint of either tier into `state_dict` (in place,
        DCP's `load`); None when there is none. Collective.

        A step in the local tier wins over the same step in the persistent one; a node
        whose local folder lacks files gets them from the peers holding replicas. Every
        file's checksum is checked first: a mismatch raises CheckpointCorrupted naming the
        file, on every rank."""
        local_inv: dict[int, dict[str, Any]] = {}
        if self.local is not None:
            for info in complete(self.local):
                local_inv[info.step] = {
                    "files": info.files,
                    "world": info.world_size,
                    "have": present(info),
                }
        pers = self._url.latest_complete() if self._url else latest_complete(self.persistent)
        mine = (self.node, self.rank, local_inv, pers.step if pers is not None else None)
        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, mine, group=self._pg)
        firsts = {r: inv for _node, r, inv, _p in gathered if r % self.local_world == 0}
        local_best: int | None = None
        for step in sorted({s for inv in firsts.values() for s in inv}, reverse=True):
            entry = next(inv[step] for inv in firsts.values() if step in inv)
            union = {n for inv in firsts.values() if step in inv for n in inv[step]["have"]}
            if entry["world"] == self.world and union >= set(entry["files"]):
                local_best = step
                break
        pers_best = max((p for *_x, p in gathered if p is not None), default=None)
        if local_best is None and pers_best is None:
            return None
        if local_best is not None and (pers_best is None or local_best >= pers_best):
            assert self.local is not None
            entry = next(inv[local_best] for inv in firsts.values() if local_best in inv)
            have = {r: list(inv.get(local_best, {}).get("have", [])) for r, inv in firsts.items()}
            folder = self.local / final_name(local_best)
            got = tiers.fill_missing(
                self._pg, folder, self.rank, self.local_world, entry["files"], have
            )
            if self.local_rank == 0 and (got or not (folder / "COMMITTED").exists()):
                record = {"step": local_best, "world_size": self.world, "files": entry["files"]}
                write_durable(folder / "COMMITTED", json.dumps(record, sort_keys=True).encode())
            dist.barrier(group=self._pg)
            self.restored_from = {n: f"rank {r}" for n, r in got.items()}
            found = read_marker(folder)
            tier = "local"
        else:
            assert pers_best is not None
            folder = self.persistent / final_name(pers_best)
            found = self._read_persistent(pers_best)
            self.restored_from = {}
            tier = "persistent"
        if found is None:
            raise CheckpointError(f"checkpoint {folder} lost its marker while loading")
        info = found
        self._verify_all(folder, info)
        dcp.load(state_dict, storage_reader=_reader(info))
        self.restored_tier = tier
        return info

    def _verify_all(self, folder: Path, info: CheckpointInfo) -> None:
        """Local rank 0 of each node checks the checksums; every rank raises the first error."""
        err = ""
        if self.local_rank == 0:
            try:
                if info.url and self._url is not None:
                    self._url.verify(info)
                else:
                    verify(folder, info)
            except CheckpointError as exc:
                err = str(exc)
        errs: list[Any] = [None] * self.world
        dist.all_gather_object(errs, err, group=self._pg)
        first = next((e for e in errs if e), "")
        if first:
            from .layout import CheckpointCorrupted

            raise CheckpointCorrupted(first)


def load(state_dict: dict[str, Any], path: str | os.PathLike[str]) -> CheckpointInfo:
    """Load the complete checkpoint in folder `path` into `state_dict` after checking every
    file's checksum (CheckpointCorrupted names the bad file). Works without a process group
    (one process reading everything, e.g. to inspect or convert a checkpoint). `path` may
    be an fsspec URL of a checkpoint folder (`memory://ckpt/step_000000010`)."""
    found: CheckpointInfo | None
    if is_url(path):
        parent, _, name = str(path).rstrip("/").rpartition("/")
        tier = UrlTier(parent)
        found = tier.read_marker(tier.join(name))
    else:
        found = read_marker(Path(path))
    if found is None:
        raise CheckpointError(f"{path} is not a complete checkpoint (no valid {MARKER} marker)")
    info = found
    if is_url(path):
        tier.verify(info)
    else:
        verify(info.path, info)
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state_dict, storage_reader=_reader(info), no_dist=not dist.is_initialized())
    return info


def _reader(info: CheckpointInfo) -> dcp.StorageReader:
    """DCP's reader of a complete checkpoint: fsspec's for a URL tier, else the file one."""
    if info.url:
        return FsspecReader(info.url)
    return dcp.FileSystemReader(str(info.path))
