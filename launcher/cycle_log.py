"""Per-cycle logs: one file per node per cycle, every line prefixed with its global rank.

Owns the `LineSink` protocol (where finished lines go: a local file, or the gRPC log
funnel of `launcher.funnel`), the `RankLogsSpecs` that tells torch.distributed.elastic to
redirect each worker's stdout/stderr into a private spool file, and `CycleLog`: one
writer thread per node that tails the spool files, cuts them into whole lines (robust to
partial and huge lines), prefixes them with `[rankR]: ` (torch's own per-rank prefix)
and writes them, together with the launcher's own `[relaunch] ` event lines, to the sink.
Only this thread writes, so lines of different ranks are never torn or interleaved
mid-line. An event line is split on "\n" only; any other line break in it (U+2028, a
carriage return) is escaped (`one_line`), so no value inside an event starts a line. The same thread hands each worker line to the optional `launcher.console`
echo (torchrun's `--tee`/`--redirects` on the launcher's console). That thread is a
poller, not an `attribution.core.background.BackgroundQueue` loop: it tails the spool files
on a timer whether or not an event line is queued, and writes the rank lines read so far
before each event line so the two keep their order.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs

if TYPE_CHECKING:
    from relaunch.launcher.console import Console

LAUNCHER_PREFIX = "[relaunch] "
MAX_LINE_BYTES = 1 << 20  # a longer line is cut into pieces of this size, each prefixed
_READ_CHUNK = 1 << 16
_POLL_S = 0.02


@runtime_checkable
class LineSink(Protocol):
    """Where the finished lines of one cycle log go. Called from one thread only."""

    def write_line(self, line: str) -> None:
        """Write one whole line (without its trailing newline)."""

    def close(self) -> None:
        """Flush and release; no write_line follows."""


class FileSink:
    """The default sink: `<log-dir>/<job-id>/cycle_<N>[.node<K>].log`, appended, flushed often."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8", errors="replace", newline="\n")  # noqa: SIM115

    def write_line(self, line: str) -> None:
        self._fh.write(line + "\n")

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


def cycle_log_name(cycle: int, node: int | None) -> str:
    """`cycle_<N>.log` on a single-node job, `cycle_<N>.node<K>.log` when nodes can be > 1."""
    return f"cycle_{cycle}.log" if node is None else f"cycle_{cycle}.node{node}.log"


class RankLogsSpecs(LogsSpecs):
    """Redirect each local worker's stdout/stderr to `<spool>/<local_rank>.{out,err}`.

    The spool directory of the next cycle is set with `set_spool_dir` before elastic
    starts the workers; `CycleLog` tails those files.
    """

    def __init__(self, root: str) -> None:
        super().__init__(log_dir=root)
        self._spool: str | None = None

    def set_spool_dir(self, path: str) -> None:
        self._spool = path

    @property
    def root_log_dir(self) -> str:
        return str(self._root_log_dir)

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        if self._spool is None:
            raise RuntimeError("RankLogsSpecs: spool directory not set before workers start")
        os.makedirs(self._spool, exist_ok=True)
        dest = LogsDest()
        for local_rank in range(len(envs)):
            dest.stdouts[local_rank] = os.path.join(self._spool, f"{local_rank}.out")
            dest.stderrs[local_rank] = os.path.join(self._spool, f"{local_rank}.err")
            err = os.path.join(self._spool, f"{local_rank}.error.json")
            dest.error_files[local_rank] = err
            envs[local_rank]["TORCHELASTIC_ERROR_FILE"] = err
        dest.filtered_stdout = os.path.join(self._spool, "filtered.out")
        dest.filtered_stderr = os.path.join(self._spool, "filtered.err")
        return dest


# every character other than "\n" that str.splitlines() (or a terminal) takes as a line end
_LINE_BREAKS = {cp: f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"
                for cp in (0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)}  # fmt: skip


def one_line(text: str) -> str:
    """`text` (no "\n") with every other line break escaped: what an event line carries
    (a value a worker reported, say) cannot start a line of its own in the cycle log."""
    return text.translate(_LINE_BREAKS)


def rank_prefix(rank: int) -> str:
    """`[rank3]: `: the prefix of a worker line in the cycle log (torch's own form)."""
    return f"[rank{rank}]: "


@dataclass
class _Source:
    rank: int
    path: str
    local_rank: int = 0
    stream: str = "out"  # "out" or "err"
    fd: int | None = None
    partial: bytes = b""

    def read_available(self) -> list[bytes]:
        """Whole lines readable now; keeps the unfinished tail for later."""
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return []
        lines: list[bytes] = []
        while True:
            chunk = os.read(self.fd, _READ_CHUNK)
            if not chunk:
                break
            data = self.partial + chunk
            parts = data.split(b"\n")
            self.partial = parts.pop()
            lines.extend(parts)
            while len(self.partial) >= MAX_LINE_BYTES:
                lines.append(self.partial[:MAX_LINE_BYTES])
                self.partial = self.partial[MAX_LINE_BYTES:]
        return lines

    def finish(self) -> list[bytes]:
        lines = self.read_available()
        if self.partial:
            lines.append(self.partial)
            self.partial = b""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        return lines


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    return text[:-1] if text.endswith("\r") else text


class CycleLog:
    """The one writer of one cycle's log on this node.

    `add_ranks({local_rank: global_rank}, spool_dir)` once workers are started; `event(text)`
    from any thread queues a launcher line (written after all rank output already in the
    spool, so "rank R exited" follows the rank's last words); `close()` drains everything,
    closes the sink and removes the spool.
    """

    def __init__(
        self,
        sink: LineSink,
        *,
        keep_spool: bool = False,
        fallback_path: str | os.PathLike[str] | None = None,
        on_sink_error: Callable[[str], None] | None = None,
        console: Console | None = None,
    ) -> None:
        self.sink = sink
        self._console = console
        self._fallback_path = fallback_path
        self._on_sink_error = on_sink_error
        self.sink_error: str | None = None
        self._sources: list[_Source] = []
        self._events: queue.SimpleQueue[tuple[str, threading.Event | None]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._spool: str | None = None
        self._keep_spool = keep_spool
        self._thread = threading.Thread(target=self._loop, name="relaunch-cycle-log", daemon=True)
        self._thread.start()

    @property
    def path(self) -> Path | None:
        return getattr(self.sink, "path", None)

    def _write(self, line: str) -> None:
        """Write to the sink; if it fails (a funnel writer gone), switch to the local file."""
        try:
            self.sink.write_line(line)
            return
        except Exception as exc:
            if self._fallback_path is None or isinstance(self.sink, FileSink):
                raise
            self.sink_error = f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception):
            self.sink.close()
        self.sink = FileSink(self._fallback_path)
        self.sink.write_line(
            f"{LAUNCHER_PREFIX}warning: log sink failed ({self.sink_error}); lines continue here"
        )
        if self._on_sink_error is not None:
            self._on_sink_error(self.sink_error)
        self.sink.write_line(line)

    def add_ranks(self, ranks: dict[int, int], spool_dir: str) -> None:
        with self._lock:
            self._spool = spool_dir
            for local_rank, global_rank in sorted(ranks.items()):
                for ext in ("out", "err"):
                    path = os.path.join(spool_dir, f"{local_rank}.{ext}")
                    self._sources.append(_Source(global_rank, path, local_rank, ext))

    def event(self, text: str, *, wait: bool = False) -> None:
        """Queue a `[relaunch] TEXT` line; with wait=True return once it is written."""
        done = threading.Event() if wait else None
        self._events.put((text, done))
        if done is not None:
            done.wait(5.0)

    def _write_rank_lines(self, final: bool = False) -> bool:
        wrote = False
        with self._lock:
            sources = list(self._sources)
        console = self._console
        for src in sources:
            prefix = rank_prefix(src.rank)
            for raw in src.finish() if final else src.read_available():
                text = body = _decode(raw)
                if body.startswith(prefix):  # torch's own excepthook prefix: redundant
                    body = body[len(prefix) :]
                self._write(prefix + body)
                if console is not None:
                    console.echo(src.local_rank, src.rank, src.stream, text, body)
                wrote = True
        if wrote and console is not None:
            console.flush()
        return wrote

    def _write_events(self) -> bool:
        wrote = False
        while True:
            try:
                text, done = self._events.get_nowait()
            except queue.Empty:
                return wrote
            self._write_rank_lines()
            for line in text.split("\n"):
                self._write(LAUNCHER_PREFIX + one_line(line))
            wrote = True
            self._flush()
            if done is not None:
                done.set()

    def _flush(self) -> None:
        flush = getattr(self.sink, "flush", None)
        if flush is not None:
            try:
                flush()
            except Exception as exc:  # noqa: BLE001 - a sink's failure is logged in the cycle log, never fatal
                self._write(f"{LAUNCHER_PREFIX}warning: log sink flush failed: {exc}")

    def _loop(self) -> None:
        while not self._stop.is_set():
            wrote = self._write_rank_lines()
            wrote = self._write_events() or wrote
            if wrote:
                self._flush()
            self._stop.wait(_POLL_S)

    def close(self) -> None:
        """Drain the spool and the event queue, close the sink. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self._write_events()
        self._write_rank_lines(final=True)
        self._write_events()
        self._flush()
        try:
            self.sink.close()
        except Exception as exc:  # noqa: BLE001 - a sink's failure is reported, never fatal
            self.sink_error = f"{type(exc).__name__}: {exc}"
            if self._on_sink_error is not None:
                self._on_sink_error(f"closing the log sink: {self.sink_error}")
        if self._spool and not self._keep_spool:
            shutil.rmtree(self._spool, ignore_errors=True)
