"""Read Flight Recorder dump files safely and turn each into a compact `RankDump`.

Owns: finding dump files (one per rank, named `<prefix><rank>`), decoding the pickled form
with a restricted unpickler (plain containers and scalars only: any class or callable in
the stream is refused), decoding the JSON form, and normalising the versions torch 2.x has
written (`seq_id` / `collective_seq_id`, `nccl_version` / `comm_lib_version`, string or
integer `pg_status` values, `process_group` as tuple or list) into per-process-group state.

Only what the analyzer needs survives normalisation: per group the last enqueued / started /
completed sequence numbers and the entries still pending (enqueued, not completed), so a
4,096-rank set stays small in memory and cheap to hand between processes.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import pickle
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from relaunch.restart_agent import safe_files

# A file is a rank dump when its name ends in the rank number (an optional
# .json/.pkl/.pickle suffix is allowed): `_dump_3`, `comm_lib_trace_rank_3`, `nccl_trace_rank_3.json`.
_RANK_RE = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")
_PEER_RE = re.compile(r"(send|recv)\s+(\d{1,9})\s*(->|<-)\s*(\d{1,9})(?!\d)")
MAX_DUMP_BYTES = 1 << 30
# a set (one dump per rank): refused before any dump is read beyond these
MAX_DUMP_FILES = 1 << 17  # candidate files (ranks up to 131,072)
MAX_SET_BYTES = 64 << 30  # their sizes together, as the file system reports them


class DumpSetTooLarge(ValueError):
    """The paths hold more dump files, or more bytes of them, than one analysis reads."""


# Bounds on numbers read from dumps: a rank beyond MAX_RANK or any integer outside
# [INT_MIN, INT_MAX] is "no value" (None), so no huge number reaches the analysis or output.
MAX_RANK = (1 << 24) - 1
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1


class DumpError(Exception):
    """A file that is not a readable Flight Recorder dump (the message says why)."""


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that builds only dicts, lists, tuples, str, bytes, numbers, bools and None.

    Flight Recorder dumps contain nothing else. Any GLOBAL/STACK_GLOBAL opcode (how a pickle
    names a class or function to call) is refused before anything is imported or called,
    and persistent ids are refused as well.
    """

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"refused to load {module}.{name}: a Flight Recorder dump holds only plain data"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id: not a Flight Recorder dump")


def safe_loads(data: bytes) -> Any:
    """Unpickle `data` allowing only plain containers and scalars (raises UnpicklingError)."""
    # BufferedReader gives the C unpickler `peek`, which keeps it as fast as pickle.loads.
    return _RestrictedUnpickler(io.BufferedReader(io.BytesIO(data))).load()


@dataclass(slots=True)
class Op:
    """One pending (enqueued, not completed) Flight Recorder entry, or a coalesced set."""

    seq: int
    channel: str
    type: str
    is_p2p: bool
    collective_seq_id: int | None
    p2p_seq_id: int | None
    op_id: int | None
    input_sizes: list[Any]
    output_sizes: list[Any]
    dtypes: list[str]
    state: str
    peers: tuple[tuple[int, int], ...] = ()  # (self local rank, peer local rank) for send/recv
    names: list[str] = field(default_factory=list)

    def signature(self) -> tuple[Any, ...]:
        """What must agree across ranks for a collective to match."""
        return (self.type, json.dumps(self.input_sizes), tuple(self.dtypes))


@dataclass(slots=True)
class GroupState:
    """One rank's view of one process group.

    Sequence numbers are kept per channel: "coll" (collective_seq_id), "p2p" (p2p_seq_id),
    "op" (op ids, which gloo's pg_status counts) or "?" (pg_status only, no entries to say
    which). NCCL's pg_status reports the seq of the last work of either kind, so a group
    with both kinds is resolved through the entries' record order (a group's work
    completes in order).
    """

    name: str
    desc: str
    pg_id: str | None = None
    status: tuple[int, int | None, int] | None = None  # raw pg_status: enqueued, started, completed
    enqueued: dict[str, int] = field(default_factory=dict)
    completed: dict[str, int] = field(default_factory=dict)
    started: dict[str, int] = field(default_factory=dict)
    last_channel: str = "?"
    pending: list[Op] = field(default_factory=list)
    stalled_at: tuple[str, int] | None = None  # (channel, seq) of the op this rank waits in
    status_source: str = "none"  # "pg_status", "entries" or "none"
    entries: int = 0
    complete: bool = False  # the dump holds this rank's whole history (first record_id is 0)


@dataclass(slots=True)
class RankDump:
    """A normalised dump of one rank."""

    rank: int
    path: str
    version: str
    comm_lib_version: str
    pg_config: dict[str, tuple[str, RanksKey]]  # name -> (desc, members as written)
    groups: dict[str, GroupState]
    unmapped_pg_status: list[str]
    entry_count: int


@dataclass(slots=True)
class DumpProblem:
    """A file that could not be used, with the reason."""

    path: str
    rank: int | None
    error: str


@dataclass(slots=True)
class DumpSet:
    """Everything read from the given paths."""

    dumps: dict[int, RankDump]
    problems: list[DumpProblem]
    ignored: list[str]
    duplicates: list[str]


# ----------------------------------------------------------------------------- files


def rank_from_name(path: str | os.PathLike[str]) -> int | None:
    """The rank a dump file name ends in, None when it does not end in digits, -1 when the
    number is over MAX_RANK (a dump whose rank cannot be used)."""
    m = _RANK_RE.search(os.path.basename(os.fspath(path)))
    if m is None:
        return None
    digits = m.group(1).lstrip("0") or "0"
    return int(digits) if len(digits) <= 8 and int(digits) <= MAX_RANK else -1


def find_dump_files(paths: Sequence[str | os.PathLike[str]]) -> tuple[list[str], list[str]]:
    """Expand directories; return (candidate dump files, ignored files in directories).

    Files named explicitly are always candidates; inside a directory only names that end in
    a rank number are, and others (e.g. `fault_injection.log`) are listed as ignored.
    Symbolic links to files are candidates too, and are refused when read (`read_dump`).
    Raises FileNotFoundError for a path that does not exist, and `DumpSetTooLarge` as soon
    as the candidates pass MAX_DUMP_FILES files or MAX_SET_BYTES bytes (sizes from `lstat`:
    nothing has been read then; each file's own limit is checked as it is read).
    """
    files: list[str] = []
    ignored: list[str] = []
    total = 0

    def add(path: str) -> None:
        nonlocal total
        files.append(path)
        if len(files) > MAX_DUMP_FILES:
            raise DumpSetTooLarge(
                f"more than {MAX_DUMP_FILES} dump files; analyse one job's dumps at a time"
            )
        with contextlib.suppress(OSError):  # unreadable: reported when it is read
            total += os.lstat(path).st_size
        if total > MAX_SET_BYTES:
            raise DumpSetTooLarge(
                f"the dump files hold more than {MAX_SET_BYTES} bytes together;"
                " analyse one job's dumps at a time"
            )

    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs.sort()
                for n in sorted(names):
                    full = os.path.join(root, n)
                    if rank_from_name(n) is not None:
                        add(full)
                    else:
                        ignored.append(full)
                        if len(ignored) > MAX_DUMP_FILES:  # listed in the result: bounded too
                            raise DumpSetTooLarge(
                                f"more than {MAX_DUMP_FILES} files that are not dumps in {p}"
                            )
        elif os.path.lexists(p):
            add(p)
        else:
            raise FileNotFoundError(p)
    return files, ignored


def decode(data: bytes) -> dict[str, Any]:
    """Decode the bytes of one dump (pickle or JSON) into its raw dict; raises DumpError."""
    if not data:
        raise DumpError("empty file")
    head = data[:64].lstrip()
    if head.startswith(b"{"):
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DumpError(f"truncated or corrupt JSON dump ({exc.__class__.__name__})") from None
    elif not head.startswith(b"\x80"):
        raise DumpError("not a Flight Recorder dump (neither a pickle nor JSON)")
    else:
        try:
            obj = safe_loads(data)
        except pickle.UnpicklingError as exc:
            msg = str(exc)
            if msg.startswith("refused"):
                raise DumpError(msg) from None
            raise DumpError(f"truncated or corrupt pickle ({msg[:80]})") from None
        except (EOFError, ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
            raise DumpError(f"truncated or corrupt pickle ({exc.__class__.__name__})") from None
        except MemoryError:
            raise DumpError("corrupt pickle (claims more memory than available)") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("entries"), list):
        raise DumpError("not a Flight Recorder dump (no 'entries' list)")
    if not any(k in obj for k in ("version", "pg_config", "pg_status")):
        raise DumpError("not a Flight Recorder dump (no version, pg_config or pg_status)")
    return obj


# ----------------------------------------------------------------------------- normalising


def _int(v: Any) -> int | None:
    """`v` as an integer in [INT_MIN, INT_MAX], else None (no value)."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, str) and len(v) > 24:
        return None
    try:
        n = int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return n if INT_MIN <= n <= INT_MAX else None


def _bounded(v: Any, depth: int = 0) -> Any:
    """A size list from a dump with out-of-range integers as None and nesting cut at 4."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return v if INT_MIN <= v <= INT_MAX else None
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else None
    if isinstance(v, (list, tuple)) and depth < 4:
        return [_bounded(x, depth + 1) for x in v]
    return None


# A group's member list as the dump wrote it: the `ranks` string (kept unparsed, and
# interned, so a 4,096-rank set does not parse and ship the world's member list 4,096
# times), or a tuple when the dump held a list. `parse_ranks` turns it into ranks.
RanksKey = str | tuple[int, ...] | None
_INTERNED: dict[str, str] = {}


def parse_ranks(v: Any) -> tuple[int, ...] | None:
    """Member ranks from a `ranks` value ('[0, 1]' or a list), None when malformed (a rank
    that is not an integer in [0, MAX_RANK] included)."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    if isinstance(v, (list, tuple)) and all(type(x) is int and 0 <= x <= MAX_RANK for x in v):
        return tuple(v)
    return None


def _ranks_key(v: Any) -> RanksKey:
    if isinstance(v, str):
        v = v.strip()
        if len(_INTERNED) > 100_000:
            _INTERNED.clear()
        return _INTERNED.setdefault(v, v) if v not in ("", "[]") else None
    return parse_ranks(v) or None


def _parse_pg_config(raw: Any) -> dict[str, tuple[str, RanksKey]]:
    out: dict[str, tuple[str, RanksKey]] = {}
    if not isinstance(raw, dict):
        return out
    for key, val in raw.items():
        if isinstance(val, dict):
            name = str(val.get("name", key) or key)
            desc = str(val.get("desc", "") or "")
            ranks = _ranks_key(val.get("ranks"))
        else:  # oldest form: name -> ranks
            name, desc, ranks = str(key), "", _ranks_key(val)
        if not name:
            continue  # gloo writes {'': {'ranks': '[]'}}
        out[name] = (desc, ranks)
    return out


def _op_type(name: str) -> str:
    base = name.split(":", 1)[1] if ":" in name else name
    return base.split(" ", 1)[0] or "unknown"


def _entry_seq(e: dict[str, Any], is_p2p: bool, unit: str) -> int | None:
    if unit == "op_id":
        return _int(e.get("op_id"))
    if is_p2p:
        return _int(e.get("p2p_seq_id"))
    v = e.get("collective_seq_id")
    return _int(v if v is not None else e.get("seq_id"))


def _entry_is_p2p(e: dict[str, Any]) -> bool:
    v = e.get("is_p2p")
    if isinstance(v, bool):
        return v
    return _PEER_RE.search(str(e.get("profiling_name", ""))) is not None


def _entry_group(e: dict[str, Any]) -> tuple[str | None, str]:
    pg = e.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        return str(pg[0]), str(pg[1]) if len(pg) > 1 else ""
    return None, ""


def _choose_unit(status_enqueued: int | None, last: dict[str, Any] | None) -> str:
    """pg_status counts in sequence ids (NCCL) or op ids (gloo); pick the one that fits."""
    if status_enqueued is None or last is None:
        return "seq"
    is_p2p = _entry_is_p2p(last)
    if _entry_seq(last, is_p2p, "seq") == status_enqueued:
        return "seq"
    if _int(last.get("op_id")) == status_enqueued:
        return "op_id"
    return "seq"


def _map_pg_ids(
    status_ids: Iterable[str],
    known: dict[str, str],
    pg_config: dict[str, tuple[str, RanksKey]],
) -> dict[str, str]:
    """Map this rank's local pg ids to group names.

    Entries give the link directly. For pg ids with no entries, both the local ids and the
    numeric group names are creation counters, so the k-th smallest id is the k-th smallest
    name, which is used only when it agrees with every link the entries gave.
    """
    mapping = dict(known)
    ids = sorted(status_ids, key=lambda s: (_int(s) is None, _int(s) or 0, s))
    names = list(pg_config)
    numeric = all(_int(n) is not None for n in names) and all(_int(i) is not None for i in ids)
    if len(ids) == len(names) and numeric:
        zipped = dict(zip(ids, sorted(names, key=int), strict=True))
        if all(zipped.get(i) == n for i, n in known.items()):
            for i, n in zipped.items():
                mapping.setdefault(i, n)
    unmapped_ids = [i for i in ids if i not in mapping]
    unmapped_names = [n for n in names if n not in mapping.values()]
    if len(unmapped_ids) == 1 and len(unmapped_names) == 1:
        mapping[unmapped_ids[0]] = unmapped_names[0]
    return mapping


def normalise(raw: dict[str, Any], rank: int, path: str) -> RankDump:
    """Turn a decoded dump into a RankDump (pure; tolerant of missing optional fields)."""
    pg_config = _parse_pg_config(raw.get("pg_config"))
    entries = [e for e in raw.get("entries", []) if isinstance(e, dict)]
    pg_status = raw.get("pg_status")
    raw_status = pg_status if isinstance(pg_status, dict) else {}

    # Link local pg ids to group names, and remember the last entry of each group.
    known: dict[str, str] = {}
    desc_of: dict[str, str] = {n: d for n, (d, _) in pg_config.items()}
    last_of: dict[str, dict[str, Any]] = {}
    by_group: dict[str, list[dict[str, Any]]] = {}
    by_key: dict[Any, list[dict[str, Any]]] = {}
    for e in entries:  # the hot loop: one dict lookup per entry
        k = e.get("pg_id")
        if k is None or not isinstance(k, (int, str)):
            k = ("name", _entry_group(e)[0])
        lst = by_key.get(k)
        if lst is None:
            lst = by_key[k] = []
        lst.append(e)
    for k, lst in by_key.items():
        name, desc = _entry_group(lst[-1])
        if isinstance(k, tuple):
            if name is None:
                continue
        else:
            name = name if name is not None else f"pg_id:{k}"
            known.setdefault(str(k), name)
        desc_of.setdefault(name, desc)
        last_of[name] = lst[-1]
        if name in by_group:  # same group under two keys: keep record order
            merged = by_group[name] + lst
            merged.sort(key=lambda e: _int(e.get("record_id")) or 0)
            by_group[name] = merged
        else:
            by_group[name] = lst
    mapping = _map_pg_ids(raw_status.keys(), known, pg_config)

    groups: dict[str, GroupState] = {}
    unmapped: list[str] = []
    for pg_id, st in raw_status.items():
        name = mapping.get(str(pg_id))
        if name is None or not isinstance(st, dict):
            unmapped.append(str(pg_id))
            continue
        gs = GroupState(name=name, desc=desc_of.get(name, ""), pg_id=str(pg_id))
        e_, c_ = _int(st.get("last_enqueued_collective")), _int(st.get("last_completed_collective"))
        s_ = _int(st.get("last_started_collective"))
        if e_ is not None and c_ is not None:
            gs.status = (e_, s_ if s_ is not None and s_ >= 0 else None, c_)
            gs.status_source = "pg_status"
        groups[name] = gs
    for name in pg_config:
        groups.setdefault(name, GroupState(name=name, desc=desc_of.get(name, "")))
    complete = bool(entries) and _int(entries[0].get("record_id")) == 0
    for name, gs in groups.items():
        gs.complete = complete
        ents = by_group.get(name, [])
        gs.entries = len(ents)
        unit = _choose_unit(gs.status[0] if gs.status else None, last_of.get(name))
        _derive(gs, ents, unit)
    for name, ents in by_group.items():
        if name not in groups:
            gs = groups[name] = GroupState(name=name, desc=desc_of.get(name, ""))
            gs.entries, gs.complete = len(ents), complete
            _derive(gs, ents, "seq")
    return RankDump(
        rank=rank,
        path=path,
        version=str(raw.get("version", "")),
        comm_lib_version=str(raw.get("comm_lib_version") or raw.get("nccl_version") or ""),
        pg_config=pg_config,
        groups=groups,
        unmapped_pg_status=sorted(unmapped),
        entry_count=len(entries),
    )


def _derive(gs: GroupState, ents: list[dict[str, Any]], unit: str) -> None:
    """Fill a group's per-channel frontiers, pending ops and stall point.

    Works from the end of the group's entries: sequence ids grow in record order within a
    channel, and a group's work completes in order, so only the pending tail and the last
    entry of each channel are looked at closely.
    """
    if not ents:
        if gs.status is not None:
            enq, started, comp = gs.status
            gs.enqueued["?"], gs.completed["?"] = enq, comp
            if started is not None:
                gs.started["?"] = started
            if enq > comp:
                gs.stalled_at = ("?", comp + 1)
        return
    flags = [e.get("is_p2p") for e in ents]
    if not all(f is True or f is False for f in flags):
        flags = [_entry_is_p2p(e) for e in ents]
    chans = ["op"] * len(ents) if unit == "op_id" else ["p2p" if f else "coll" for f in flags]

    def seq(i: int) -> int:
        v = _entry_seq(ents[i], bool(flags[i]), unit)
        return -1 if v is None else v

    n = len(ents)
    channels = set(chans)
    last_idx: dict[str, int] = {}
    for i in range(n - 1, -1, -1):
        last_idx.setdefault(chans[i], i)
        if len(last_idx) == len(channels):
            break
    last_ch = gs.last_channel = chans[-1]
    for ch, i in last_idx.items():
        gs.enqueued[ch] = seq(i)
    if gs.status is not None:
        enq, started, comp = gs.status
        gs.enqueued[last_ch] = max(gs.enqueued[last_ch], enq)
        if started is not None:
            gs.started[last_ch] = started
        boundary = n  # entries [0, boundary) are done
        if len(channels) == 1:
            while boundary > 0 and seq(boundary - 1) > comp:
                boundary -= 1
        else:
            pos = next((i for i in range(n - 1, -1, -1) if seq(i) == comp), None)
            if pos is None and all(seq(i) > comp for i in range(n)):
                pos = -1
            if pos is None:  # order the other channel around the last channel's frontier
                boundary = next((i for i in range(n) if chans[i] == last_ch and seq(i) > comp), n)
            else:
                boundary = pos + 1
    else:
        gs.status_source = "entries"
        boundary = next(
            (i + 1 for i in range(n - 1, -1, -1) if ents[i].get("state") == "completed"), 0
        )
    for ch in channels:
        done_i = next((i for i in range(boundary - 1, -1, -1) if chans[i] == ch), None)
        if done_i is not None:
            gs.completed[ch] = seq(done_i)
        else:
            first = next(i for i in range(n) if chans[i] == ch)
            gs.completed[ch] = seq(first) - 1
    if gs.status is not None and len(channels) == 1:
        gs.completed[last_ch] = gs.status[2]
    gs.pending = _merge_ops([(chans[i], seq(i), ents[i]) for i in range(boundary, n)])
    if gs.pending:
        gs.stalled_at = (gs.pending[0].channel, gs.pending[0].seq)
    elif gs.status is not None and gs.status[0] > gs.status[2] and len(channels) == 1:
        gs.stalled_at = (last_ch, gs.status[2] + 1)  # its entries fell out of the ring buffer


def _as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else []


def _merge_ops(items: list[tuple[str, int, dict[str, Any]]]) -> list[Op]:
    """Pending entries as ops in record order; entries sharing a seq (coalesced) merge."""
    ops: dict[tuple[str, int], Op] = {}
    for ch, seq, e in items:
        pname = str(e.get("profiling_name", ""))
        m = _PEER_RE.search(pname)
        peers: tuple[tuple[int, int], ...] = ((int(m.group(2)), int(m.group(4))),) if m else ()
        sizes = _bounded(_as_list(e.get("input_sizes")))
        out_sizes = _bounded(_as_list(e.get("output_sizes")))
        dtypes = [str(d) for d in _as_list(e.get("input_dtypes"))]
        op = ops.get((ch, seq))
        if op is None:
            ops[(ch, seq)] = Op(
                seq=seq,
                channel=ch,
                type=_op_type(pname),
                is_p2p=_entry_is_p2p(e),
                collective_seq_id=_int(e.get("collective_seq_id", e.get("seq_id"))),
                p2p_seq_id=_int(e.get("p2p_seq_id")),
                op_id=_int(e.get("op_id")),
                input_sizes=sizes,
                output_sizes=out_sizes,
                dtypes=dtypes,
                state=str(e.get("state", "")),
                peers=peers,
                names=[pname],
            )
        else:  # coalesced: several entries share one sequence id
            op.names.append(pname)
            op.input_sizes.extend(sizes)
            op.output_sizes.extend(out_sizes)
            op.dtypes.extend(dtypes)
            op.peers += peers
            op.type = "coalesced"
    return list(ops.values())


# ----------------------------------------------------------------------------- reading


def _read_regular(path: str) -> bytes:
    """The bytes of `path`, a regular file, at most MAX_DUMP_BYTES of them, read through
    the one file-safety path (`restart_agent.safe_files.read_bounded`, `follow=False`):
    a symbolic link is not followed (`relaunch fr` resolves the links a user names on its
    command line; one found in a directory, or swapped in after a check, is refused), a
    FIFO, device, socket or directory is refused before any read, and the limit counts
    bytes actually read. Its refusals become `DumpError`s."""
    limit = MAX_DUMP_BYTES
    try:
        return safe_files.read_bounded(path, limit, follow=False)
    except safe_files.SymlinkRefused as exc:
        if exc.errno == errno.ELOOP:
            raise DumpError("a symbolic link (not followed)") from None
        raise
    except safe_files.NotRegularFile as exc:
        raise DumpError(exc.strerror or "not a regular file") from None
    except IsADirectoryError:
        raise DumpError("not a regular file (a directory)") from None
    except safe_files.TooLarge as exc:
        raise DumpError(f"file is over the {limit}-byte limit ({exc.strerror})") from None


def read_dump(path: str | os.PathLike[str], rank: int | None = None) -> RankDump:
    """Read and normalise one dump file; raises DumpError or OSError."""
    path = os.fspath(path)
    if rank is None:
        rank = rank_from_name(path)
    if rank == -1:
        raise DumpError(f"the rank number in the file name is over {MAX_RANK}")
    raw = decode(_read_regular(path))
    if rank is None:
        rank = _int(raw.get("rank"))
        if rank is not None and not 0 <= rank <= MAX_RANK:
            raise DumpError(f"the dump's rank is not in 0..{MAX_RANK}")
    if rank is None:
        raise DumpError("a dump, but its file name does not end in the rank number")
    return normalise(raw, rank, path)


def _read_one(path: str) -> RankDump | DumpProblem:
    rank = rank_from_name(path)
    if rank == -1:
        return DumpProblem(path, None, f"the rank number in the file name is over {MAX_RANK}")
    try:
        return read_dump(path, rank)
    except DumpError as exc:
        return DumpProblem(path, rank, str(exc))
    except OSError as exc:
        return DumpProblem(path, rank, f"unreadable: {exc.strerror or exc.__class__.__name__}")
    except RecursionError:
        return DumpProblem(path, rank, "corrupt dump (nesting too deep)")
    except Exception as exc:  # noqa: BLE001 - a well-formed pickle of the wrong shape must not crash a set
        return DumpProblem(path, rank, f"not a usable Flight Recorder dump ({exc!r:.80})")


def _read_chunk(paths: list[str]) -> list[RankDump | DumpProblem]:
    import gc

    gc.disable()  # unpickling thousands of small dicts: the cyclic GC only costs time here
    try:
        return [_read_one(p) for p in paths]
    finally:
        gc.enable()


def read_paths(paths: Sequence[str | os.PathLike[str]], workers: int | None = None) -> DumpSet:
    """Read every dump under `paths` (files or directories).

    Unreadable, truncated, corrupt and non-dump files become `DumpSet.problems`; a path that
    does not exist raises FileNotFoundError. `workers` > 1 reads in that many processes
    (default: one per CPU for sets of 256 files or more, else in this process).
    """
    files, ignored = find_dump_files(paths)
    if workers is None:
        workers = min(os.cpu_count() or 1, 16) if len(files) >= 256 else 1
    results: list[RankDump | DumpProblem]
    import multiprocessing

    # fork only: spawn/forkserver re-import the caller's __main__ (e.g. the CLI entry point).
    if workers > 1 and len(files) > 1 and "fork" in multiprocessing.get_all_start_methods():
        from concurrent.futures import ProcessPoolExecutor

        n = max(1, len(files) // (workers * 4))
        chunks = [files[i : i + n] for i in range(0, len(files), n)]
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            results = [r for part in pool.map(_read_chunk, chunks) for r in part]
    else:
        results = _read_chunk(files)
    dumps: dict[int, RankDump] = {}
    problems: list[DumpProblem] = []
    duplicates: list[str] = []
    for r in results:
        if isinstance(r, DumpProblem):
            problems.append(r)
        elif r.rank in dumps:
            duplicates.append(r.path)
        else:
            dumps[r.rank] = r
    return DumpSet(dumps=dumps, problems=problems, ignored=ignored, duplicates=duplicates)
