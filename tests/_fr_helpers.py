"""Build Flight Recorder dumps shaped like the ones torch writes, for tests and benchmarks.

A job is a list of process groups and, per rank, a program of calls. Each rank has enqueued
its first `reached[rank]` calls and completed its first `completed[rank]`; from that the
helper writes what ProcessGroupNCCL would have dumped: per-group collective / p2p sequence
ids and op ids, `pg_status` keyed by the rank's own local pg ids (creation order), `pg_config`
with `ranks` as a string, a ring buffer of the last `buffer` entries, version 2.9 with
`nccl_version` (or 2.10 with `comm_lib_version`).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REAL_DUMPS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "fr_dumps"


def real_dumps_dir(name: str) -> Path:
    """The shared real NCCL dump set `name` (gpu_error_2nd, lock_gil_1st): next to the
    repository in shared/data/fr_dumps, or under $RELAUNCH_FR_DUMPS; skips when absent."""
    import os

    for base in (Path(os.environ.get("RELAUNCH_FR_DUMPS", REAL_DUMPS)), REAL_DUMPS):
        if (base / name).is_dir():
            return base / name
    import pytest

    pytest.skip(f"shared real dumps {name!r} not found next to the repository")
    raise AssertionError  # unreachable


@dataclass
class Group:
    name: str
    desc: str
    ranks: list[int]


@dataclass
class Call:
    """One call on a group: a collective (`peer` None) or a send/recv to `peer` (global)."""

    group: str
    op: str = "all_reduce"
    sizes: list[list[int]] = field(default_factory=lambda: [[4]])
    dtype: str = "Float"
    peer: int | None = None
    coalesced: int = 1  # >1: that many entries share one sequence id


def _entry(
    rank: int,
    g: Group,
    pg_id: int,
    call: Call,
    coll: int,
    p2p: int,
    op_id: int,
    record_id: int,
    state: str,
    prefix: str,
) -> dict[str, Any]:
    is_p2p = call.peer is not None
    name = f"{prefix}:{call.op}"
    if is_p2p:
        me, other = g.ranks.index(rank), g.ranks.index(call.peer)  # type: ignore[arg-type]
        name += f" {me}->{other}" if call.op == "send" else f" {me}<-{other}"
    return {
        "collective_seq_id": coll,
        "input_dtypes": [call.dtype] * len(call.sizes),
        "input_sizes": call.sizes,
        "is_p2p": is_p2p,
        "op_id": op_id,
        "output_dtypes": [call.dtype] * len(call.sizes),
        "output_sizes": call.sizes,
        "p2p_seq_id": p2p if is_p2p else 0,
        "pg_id": pg_id,
        "process_group": (g.name, g.desc),
        "profiling_name": name,
        "record_id": record_id,
        "retired": False,
        "state": state,
        "thread_id": "140000000000000",
        "thread_name": "python3",
        "time_created_ns": 1_758_581_237_526_848_193 + record_id * 1000,
        "time_discovered_completed_ns": None,
        "time_discovered_started_ns": None,
        "timeout_ms": 600000,
    }


def rank_dump(
    rank: int,
    groups: Sequence[Group],
    program: Sequence[Call],
    reached: int,
    completed: int,
    *,
    version: str = "2.9",
    buffer: int = 2000,
    mark_completed: bool = False,
    prefix: str = "nccl",
    started: int | None = None,
) -> dict[str, Any]:
    """The raw dump dict of one rank that enqueued `reached` and completed `completed` calls."""
    mine = [g for g in groups if rank in g.ranks]
    by_name = {g.name: g for g in mine}
    pg_ids = {g.name: i for i, g in enumerate(mine)}
    coll = dict.fromkeys(by_name, 0)
    p2p = dict.fromkeys(by_name, 0)
    ops = dict.fromkeys(by_name, 0)
    status = {g.name: [-1, -1, -1] for g in mine}  # enqueued, started, completed
    entries: list[dict[str, Any]] = []
    record = 0
    for i, call in enumerate(program[:reached]):
        g = by_name[call.group]
        if call.peer is None:
            coll[g.name] += 1
            seq = coll[g.name]
        else:
            p2p[g.name] += 1
            seq = p2p[g.name]
        done = i < completed
        st = status[g.name]
        st[0] = seq
        if done:
            st[2] = seq
        if started is not None and i < started:
            st[1] = seq
        for _ in range(call.coalesced):
            ops[g.name] += 1
            state = "completed" if (done and mark_completed) else "scheduled"
            entries.append(
                _entry(
                    rank,
                    g,
                    pg_ids[g.name],
                    call,
                    coll[g.name],
                    p2p[g.name],
                    ops[g.name],
                    record,
                    state,
                    prefix,
                )
            )
            record += 1
    dump: dict[str, Any] = {
        "version": version,
        "pg_config": {
            g.name: {"name": g.name, "desc": g.desc, "ranks": json.dumps(g.ranks)} for g in mine
        },
        "pg_status": {
            str(pg_ids[n]): {
                "last_enqueued_collective": s[0],
                "last_started_collective": s[1],
                "last_completed_collective": s[2],
            }
            for n, s in status.items()
        },
        "entries": entries[-buffer:] if buffer else [],
    }
    dump["comm_lib_version" if version >= "2.10" else "nccl_version"] = "2.27.3"
    return dump


def job_dumps(
    groups: Sequence[Group],
    programs: dict[int, Sequence[Call]],
    reached: dict[int, int],
    completed: dict[int, int],
    **kw: Any,
) -> dict[int, dict[str, Any]]:
    """Raw dumps of every rank of `programs`."""
    return {
        r: rank_dump(r, groups, programs[r], reached[r], completed[r], **kw)
        for r in sorted(programs)
    }


def write_dumps(
    dumps: dict[int, dict[str, Any]],
    directory: Path,
    *,
    prefix: str = "_dump_",
    fmt: str = "pickle",
) -> list[Path]:
    """Write one file per rank; `fmt` 'pickle' (protocol 2, like torch) or 'json'."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for r, d in dumps.items():
        p = directory / f"{prefix}{r}"
        if fmt == "json":
            p.write_text(json.dumps(d))
        else:
            p.write_bytes(pickle.dumps(d, protocol=2))
        out.append(p)
    return out


def stalled_allreduce_job(
    world: int, culprits: Sequence[int], steps: int = 5, missing: Sequence[int] = ()
) -> dict[int, dict[str, Any]]:
    """World-size job of `steps` all-reduces on the default group; `culprits` never reach the
    last one while everyone else waits in it. `missing` ranks get no dump."""
    g = Group("0", "default_pg", list(range(world)))
    prog = [Call("0", "all_reduce", [[1024]], "Float") for _ in range(steps)]
    reached = {r: steps - 1 if r in culprits else steps for r in range(world)}
    completed = dict.fromkeys(range(world), steps - 1)
    dumps = job_dumps([g], dict.fromkeys(range(world), prog), reached, completed)
    for r in missing:
        dumps.pop(r)
    return dumps


# ----------------------------------------------------------------------------- real gloo job

GLOO_WORKER = r"""
import datetime, json, linecache, os, pickle, sys, threading, time
import torch
import torch.distributed as dist

rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
hang_rank, guard = int(sys.argv[5]), float(sys.argv[6])
json_ranks = {int(x) for x in sys.argv[7].split(",") if x}
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
# The group timeout must never fire before the dumps (a timed-out op is retired and would
# read as completed); the dump waits for no fixed time, so it only has to outlast the guard.
dist.init_process_group("gloo", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=guard + 60))
pairs = [dist.new_group([r, r + 1], group_desc=f"pair{r}") for r in range(0, world, 2)]
mine = pairs[rank // 2]
deadline = time.monotonic() + guard  # hang guard only: no outcome waits on it
phase = "setup"  # set by the main thread just before each final call
final = "hang" if rank == hang_rank else "pair" if rank == hang_rank ^ 1 else "world"

def fail(why):
    sys.stderr.write(f"rank {rank}: {why}\n")
    sys.stderr.flush()
    os._exit(3)

def in_final_call(main_id):
    # Read phase BEFORE the frame snapshot: if it already names the final call then, the
    # snapshot was taken after the main thread set it, so the frame is in that final call.
    if phase != final:
        return False
    f = sys._current_frames().get(main_id)
    if f is None:
        return False
    if final == "hang":  # module level, in the endless sleep: no collective follows
        return f.f_code.co_name == "<module>"
    code = f.f_code
    return (code.co_name == "all_reduce"
            and os.path.basename(code.co_filename) == "distributed_c10d.py"
            and linecache.getline(code.co_filename, f.f_lineno).strip() == "work.wait()")

def pg_config():
    cfg = {}
    world_pg = dist.distributed_c10d._get_default_group()
    for pg in [world_pg] + [p for p in pairs if isinstance(p, dist.ProcessGroup)]:
        ranks = dist.get_process_group_ranks(pg)
        desc = "default_pg" if pg is world_pg else f"pair{ranks[0]}"
        cfg[pg.group_name] = {"name": pg.group_name, "desc": desc, "ranks": json.dumps(ranks)}
    return cfg

def read_fr():
    fr = torch._C._distributed_c10d
    if rank in json_ranks:
        js = fr._dump_fr_trace_json()
        return json.loads(js.decode() if isinstance(js, bytes) else js)
    return pickle.loads(fr._dump_fr_trace())  # our own process's dump: trusted

def settled(d):
    # gloo's worker wakes the caller first and retires the op (and bumps pg_status) after,
    # so a dump taken at once may still show a finished op as pending. Settled: every
    # entry is retired except the final op the main thread is blocked in (none if hung).
    pending = [e for e in d["entries"] if not e["retired"]]
    if final == "hang":
        ok = not pending
    else:
        ok = len(pending) == 1 and pending[0] is d["entries"][-1]
    if not ok:
        return False
    # pg_status is bumped after the retire (seen on a loaded machine: a retired barrier and
    # all_reduce still counted as not completed there): wait until it counts them all
    done = {}
    for e in d["entries"]:
        if e["retired"]:
            pg = str(e["pg_id"])
            done[pg] = max(done.get(pg, -1), int(e["collective_seq_id"]))
    status = d.get("pg_status") or {}
    return all(
        int((status.get(pg) or {}).get("last_completed_collective", -1)) >= seq
        for pg, seq in done.items()
    )

def dump(main_id):
    while not in_final_call(main_id):
        if time.monotonic() > deadline:
            fail(f"never blocked in its final call ({final}); phase {phase}")
        time.sleep(0.01)
    d = read_fr()
    while not settled(d):  # reading the buffer changes nothing in it (checked on torch 2.13)
        if time.monotonic() > deadline:
            fail("earlier ops never retired")
        time.sleep(0.01)
        d = read_fr()
    d["pg_config"] = pg_config()  # gloo writes an empty pg_config
    if rank in json_ranks:
        with open(os.path.join(out, f"_dump_{rank}.json"), "w") as fh:
            json.dump(d, fh)
    else:
        with open(os.path.join(out, f"_dump_{rank}"), "wb") as fh:
            pickle.dump(d, fh, protocol=2)
    sync = os.path.join(out, "..", os.path.basename(out) + ".sync")
    os.makedirs(sync, exist_ok=True)
    open(os.path.join(sync, f"done.{rank}"), "w").close()
    while not all(os.path.exists(os.path.join(sync, f"done.{r}")) for r in range(world)):
        if time.monotonic() > deadline:  # exit only when every rank has dumped
            fail("not every rank dumped")
        time.sleep(0.05)
    os._exit(0)

threading.Thread(target=dump, args=(threading.main_thread().ident,), daemon=True).start()
t = torch.ones(8)
for _ in range(3):
    dist.all_reduce(t)
dist.all_reduce(t, group=mine)
dist.barrier()
if rank == hang_rank:
    phase = "hang"
    while True:  # hangs: never calls the collective its pair waits in
        time.sleep(3600)
phase = "pair"
dist.all_reduce(torch.ones(2, 3), group=mine)
phase = "world"
dist.all_reduce(torch.ones(5))
fail("the world all_reduce returned")
"""


def run_gloo_job(
    out: Path,
    world: int,
    hang_rank: int,
    port: int,
    guard: float = 120.0,
    json_ranks: Sequence[int] = (),
) -> list[str]:
    """Run a real `world`-rank gloo job where `hang_rank` never enters its pair's all_reduce.
    Each rank dumps its Flight Recorder buffer (ranks in `json_ranks` in the JSON form) from a
    watcher thread once its main thread is provably in its final call: the hung rank in its
    sleep, its pair partner blocked in the pair all_reduce, the others in the world
    all_reduce; and once gloo has retired every earlier op. No step waits a fixed time;
    `guard` seconds only bound a hang. Returns each rank's stderr tail (for failure
    messages)."""
    import os
    import subprocess
    import sys
    import time

    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="2000", OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                GLOO_WORKER,
                str(r),
                str(world),
                str(port),
                str(out),
                str(hang_rank),
                str(guard),
                ",".join(map(str, json_ranks)),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for r in range(world)
    ]
    end = time.monotonic() + guard + 60
    tails = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=max(1.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        tails.append(err.decode(errors="replace")[-2000:])
    return tails
