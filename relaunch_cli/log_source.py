"""Read the log `relaunch analyze` was given: a file, a gzip file, or `-` (stdin).

Owns opening the log safely (regular files only, checked on the opened descriptor:
`O_NONBLOCK` so a FIFO swapped in cannot block, `fstat` so a device such as /dev/zero is
refused), gzip decompression (recognised by its magic bytes, whatever the name; several
members are read in turn), the binary-file check, and streaming the text through the
restart agent's `LogScanner` (with SHA-256 when asked and a progress bar on a terminal).

Binary: a log is refused as binary when it starts with the magic bytes of a known binary
format (ELF, pickle, zip, PNG, xz, zstd), or when, in its first 64 KiB with NUL bytes left
out, at least 512 bytes remain and more than 10% of them are control characters other
than tab, newline, carriage return, form feed, vertical tab, backspace and escape. NUL
bytes never count: crashed nodes leave runs of them in logs, and those logs are analysed.
Binary junk after the first 64 KiB is analysed like any other bytes. `--allow-binary`
analyses a binary file anyway.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import stat
import sys
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from relaunch.cli.errors import UserError
from relaunch.cli.progress_bar import ProgressBar
from relaunch.restart_agent import safe_files

if TYPE_CHECKING:
    from relaunch.restart_agent.budget import AnalysisBudget

EXIT_BAD_INPUT = 2
CHUNK = 1 << 20
SNIFF_BYTES = 64 << 10
SNIFF_MIN_TEXT = 512
SNIFF_MAX_CONTROL = 0.10
_TEXT_CONTROLS = b"\t\n\r\f\v\b\x1b"
_CONTROLS = bytes(b for b in (*range(0x20), 0x7F) if b not in _TEXT_CONTROLS and b != 0)
_GZIP_MAGIC = b"\x1f\x8b"
_MAGIC = (
    (b"\x7fELF", "an ELF executable"),
    (b"\x80\x02", "a Python pickle"),
    (b"\x80\x03", "a Python pickle"),
    (b"\x80\x04", "a Python pickle"),
    (b"\x80\x05", "a Python pickle"),
    (b"PK\x03\x04", "a zip archive"),
    (b"\x89PNG", "a PNG image"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"\x28\xb5\x2f\xfd", "a zstd archive"),
)


@dataclass
class ReadLog:
    evidence: Any  # restart_agent CycleEvidence
    identity: dict[str, Any]  # {"path", "size", "sha256"} of the text analysed
    warnings: list[str]
    # a file holding the analysed text (for readers of the log after the scan, e.g. the
    # LLM's context): the log itself when it is plain, else the `spool` copy, else None
    text_path: str | None = None
    spooled: bool = False

    def discard(self) -> None:
        """Remove the spooled copy, if any."""
        if self.spooled and self.text_path:
            with contextlib.suppress(OSError):
                os.unlink(self.text_path)


def binary_reason(head: bytes) -> str | None:
    """Why `head` (the first bytes of a log) is binary, or None when it is text."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return f"it is {what}"
    sample = head[:SNIFF_BYTES].replace(b"\x00", b"")
    if len(sample) < SNIFF_MIN_TEXT:
        return None
    controls = len(sample) - len(sample.translate(None, _CONTROLS))
    share = controls / len(sample)
    if share > SNIFF_MAX_CONTROL:
        return (
            f"{share:.0%} of its first {len(head[:SNIFF_BYTES]) >> 10 or 1} KiB are control bytes"
        )
    return None


def open_regular(path: str) -> BinaryIO:
    """Open `path` for reading through the one file-safety path
    (`restart_agent.safe_files.open_regular`: without blocking, only a regular file, checked
    on the descriptor); each refusal is a one-line `UserError`."""
    try:
        fd = safe_files.open_regular(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise UserError(f"broken symbolic link: {path}", EXIT_BAD_INPUT) from None
        raise UserError(f"no such file: {path}", EXIT_BAD_INPUT) from None
    except PermissionError:
        raise UserError(f"permission denied: {path}", EXIT_BAD_INPUT) from None
    except IsADirectoryError:
        raise UserError(f"is a directory, not a log file: {path}", EXIT_BAD_INPUT) from None
    except safe_files.NotRegularFile:
        # a device such as /dev/zero never ends, a FIFO blocks, a socket cannot be read
        raise UserError(f"not a regular file: {path}", EXIT_BAD_INPUT) from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}", EXIT_BAD_INPUT) from None
    return os.fdopen(fd, "rb", buffering=0)


class _Reader:
    """Chunks of a log's text: raw bytes, or gzip members decompressed in turn.

    Decompression is incremental (at most `CHUNK` bytes out per step), so a gzip bomb costs
    time, not memory; what decompressed before a truncation or corruption is kept, and
    `problem` says what happened."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.raw_read = 0
        self.problem: str | None = None
        self.compressed = False

    def _raw(self) -> bytes:
        data = self.raw.read(CHUNK) or b""
        self.raw_read += len(data)
        return data

    def chunks(self) -> Iterator[bytes]:
        first = self._raw()
        if first.startswith(_GZIP_MAGIC):
            return self._gunzip(first)
        return self._plain(first)

    def _plain(self, first: bytes) -> Iterator[bytes]:
        data = first
        while data:
            yield data
            data = self._raw()

    def _gunzip(self, first: bytes) -> Iterator[bytes]:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.compressed = True
        buf = first
        while True:
            try:
                out = d.decompress(buf, CHUNK)
            except zlib.error as exc:
                self.problem = f"corrupt gzip data ({exc})"
                return
            if out:
                yield out
            buf = d.unconsumed_tail
            if d.eof:
                rest = d.unused_data or self._raw()
                if not rest:
                    return  # the clean end
                if not rest.strip(b"\x00"):  # zero padding after the last member
                    self._only_zeros_left()
                    return
                if not rest.startswith(_GZIP_MAGIC):
                    self.problem = "data after the end of the gzip stream"
                    return
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the next member
                buf = rest
                continue
            if not buf:
                buf = self._raw()
                if not buf:
                    tail = d.flush()
                    if tail:
                        yield tail
                    self.problem = "truncated gzip data"
                    return

    def _only_zeros_left(self) -> None:
        while data := self._raw():
            if data.strip(b"\x00"):
                self.problem = "data after the end of the gzip stream"
                return


MAX_BYTES_ENV = "RELAUNCH_ANALYZE_MAX_BYTES"
DEFAULT_MAX_BYTES = 16 << 30


def max_input_bytes() -> int:
    """The most bytes of text `relaunch analyze` reads (stdin, decompressed gzip):
    $RELAUNCH_ANALYZE_MAX_BYTES, default 16 GiB; past it the verdict is made on what was
    read and a warning says so."""
    try:
        value = int(os.environ.get(MAX_BYTES_ENV, DEFAULT_MAX_BYTES))
    except ValueError:
        return DEFAULT_MAX_BYTES
    return value if value > 0 else DEFAULT_MAX_BYTES


def read_log(
    path: str,
    *,
    hash_log: bool,
    allow_binary: bool = False,
    spool: bool = False,
    budget: AnalysisBudget | None = None,
) -> ReadLog:
    """Scan the log at `path` (`-`: stdin); raises `UserError` (exit 2) for an unusable one.

    Reading stops at $RELAUNCH_ANALYZE_MAX_BYTES of text and where the analysis `budget`
    (restart_agent/budget.py; None: its defaults) is reached; either way the verdict is
    made on what was read and a warning says so.

    With `spool`, text that is not a plain file (stdin, gzip) is also copied to a
    temporary file (`ReadLog.text_path`; the caller calls `discard()`)."""
    from relaunch.restart_agent.scanner import LogScanner

    stdin = path == "-"
    if stdin:
        raw: BinaryIO = sys.stdin.buffer
        total = None
        try:
            st = os.fstat(raw.fileno())
            total = st.st_size if stat.S_ISREG(st.st_mode) else None
        except (OSError, ValueError, AttributeError):
            st = None
        if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)
                                   or stat.S_ISSOCK(st.st_mode)):  # fmt: skip
            # refused before reading: /dev/zero never ends, a directory cannot be read
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a device"
            raise UserError(f"stdin is {kind}, not a log", EXIT_BAD_INPUT)
    else:
        raw = open_regular(path)
        total = os.fstat(raw.fileno()).st_size
    name = "<stdin>" if stdin else path
    reader = _Reader(raw)
    scanner = LogScanner(budget=budget)
    hasher = hashlib.sha256() if hash_log else None
    warnings: list[str] = []
    size = 0
    bar = ProgressBar.for_stream(total, label="relaunch analyze: ")
    copy: Any = None
    try:
        chunks = reader.chunks()
        head = b""
        for data in chunks:  # the first 64 KiB of text decide whether it is binary
            head += data
            if len(head) >= SNIFF_BYTES:
                break
        if not allow_binary:
            why = binary_reason(head)
            if why is not None:
                raise UserError(
                    f"{name} looks like a binary file, not a log ({why}); "
                    "--allow-binary analyses it anyway",
                    EXIT_BAD_INPUT,
                )
        plain = not stdin and not reader.compressed
        if spool and not plain:
            copy = tempfile.NamedTemporaryFile(prefix="relaunch-log-", delete=False)  # noqa: SIM115
        limit = max_input_bytes()
        for data in itertools.chain((head,), chunks):
            if size + len(data) > limit:  # a stream without end: decide on what was read
                data = data[: limit - size]
                reader.problem = (
                    f"input longer than {limit} bytes (${MAX_BYTES_ENV}); the rest was not read"
                )
                if not data:
                    break
            scanner.feed(data)
            used = scanner.bytes_read - size  # less than `data` once the budget is reached
            data = data[:used] if used < len(data) else data
            size += used
            if copy is not None:
                copy.write(data)
            if hasher is not None:
                hasher.update(data)
            bar.update(reader.raw_read)
            if scanner.budget_reached is not None:  # the verdict is made on what was read
                break
        if reader.problem is not None and size == 0:
            raise UserError(f"{name}: {reader.problem}", EXIT_BAD_INPUT)
    except BaseException as exc:
        if copy is not None:
            copy.close()
            os.unlink(copy.name)
        if isinstance(exc, OSError):  # reading the log, or writing the spooled copy
            raise UserError(f"cannot read {name}: {exc.strerror or exc}", EXIT_BAD_INPUT) from None
        raise
    finally:
        bar.close()
        if not stdin:
            raw.close()
    if copy is not None:
        copy.close()
    if reader.problem is not None:
        warnings.append(f"{name}: {reader.problem}; analysed the {size} bytes before it")
    if (reached := scanner.budget_reached) is not None:
        warnings.append(
            f"{name}: analysis budget reached ({reached['reached']} {reached['limit']:g});"
            f" the verdict is made on the first {size} bytes, the rest was not read"
            " (--budget-cpu-seconds, --budget-kept-lines)"
        )
    identity = {
        "path": None if stdin else os.path.abspath(path),  # stored absolute (issue 25)
        "size": size,
        "sha256": hasher.hexdigest() if hasher is not None else None,
    }
    text_path = copy.name if copy is not None else (path if plain else None)
    return ReadLog(scanner.finish(), identity, warnings, text_path, copy is not None)
