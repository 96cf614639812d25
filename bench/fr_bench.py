"""Benchmark: Flight Recorder analysis of synthetic dumps, up to 4,096 ranks x 2,000 entries.

Generates (untimed) one pickled dump per rank into a temporary directory, shaped like
ProcessGroupNCCL's: tensor-parallel groups of 8, pipeline pairs, data-parallel groups and
the world group; a ring buffer of the last 2,000 entries; two ranks that never reach their
last tensor-parallel collective: their TP peers wait in it, and every other rank waits in a
world all-reduce that those 16 ranks never reach (thousands of waiters in one group). Then, per world size, it
times in this one process:

- baseline: `pickle.load` of every file (the floor for any Python reader of these files);
- read: `read_paths` (restricted unpickling + normalising), in this process and with
  worker processes;
- analysis: `analyze` on what was read;

and prints the figures, the ratio to the baseline and the time per rank (flat = linear).

    python bench/fr_bench.py                      # 512, 1024, 2048, 4096 ranks
    python bench/fr_bench.py --ranks 256 512 --entries 500   # quick
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relaunch.attribution.fr.analyzer import analyze
from relaunch.attribution.fr.reader import read_paths
from tests._fr_helpers import Call, Group, rank_dump

TP, PP = 8, 2


def layout(world: int) -> list[Group]:
    """World, TP groups of 8, PP pairs (rank, rank + world/2), DP groups: numeric names."""
    groups = [Group("0", "default_pg", list(range(world)))]
    half = world // PP
    n = 1
    for start in range(0, world, TP):
        groups.append(Group(str(n), "TENSOR_MODEL_PARALLEL_GROUP", list(range(start, start + TP))))
        n += 1
    for r in range(half):
        groups.append(Group(str(n), "PIPELINE_MODEL_PARALLEL_GROUP", [r, r + half]))
        n += 1
    for stage in range(PP):
        for t in range(TP):
            ranks = [r for r in range(stage * half, (stage + 1) * half) if r % TP == t]
            groups.append(Group(str(n), "DATA_PARALLEL_GROUP", ranks))
            n += 1
    return groups


def program(rank: int, world: int, groups: list[Group], calls: int) -> list[Call]:
    mine = [g for g in groups if rank in g.ranks]
    tp = next(g for g in mine if g.desc.startswith("TENSOR"))
    pp = next(g for g in mine if g.desc.startswith("PIPELINE"))
    dp = next(g for g in mine if g.desc.startswith("DATA"))
    peer = pp.ranks[1] if pp.ranks[0] == rank else pp.ranks[0]
    first_stage = rank < world // PP
    step = [
        Call(tp.name, "_all_gather_base", [[2048, 1, 5120]], "BFloat16"),
        Call(tp.name, "_reduce_scatter_base", [[8192, 1, 5120]], "BFloat16"),
        Call(tp.name, "_all_gather_base", [[2048, 1, 5120]], "BFloat16"),
        Call(tp.name, "_reduce_scatter_base", [[8192, 1, 5120]], "BFloat16"),
        Call(pp.name, "send" if first_stage else "recv", [[2048, 1, 5120]], "BFloat16", peer=peer),
        Call(dp.name, "all_reduce", [[264]], "Float"),
        Call(tp.name, "all_reduce", [[16]], "Long"),
        Call(tp.name, "broadcast", [[1, 8192]], "Long"),
    ]
    prog = (step * (calls // len(step) + 1))[:calls]
    prog[-2] = Call(tp.name, "_reduce_scatter_base", [[8192, 1, 5120]], "BFloat16")
    prog[-1] = Call("0", "all_reduce", [[1]], "Float")
    return prog


def _write(args: tuple[int, int, int, list[int], str]) -> None:
    world, entries, lo, culprits, out = args
    groups = layout(world)
    calls = entries + entries // 20  # the ring buffer has wrapped: oldest entries evicted
    tp_peers = {q for c in culprits for q in range(c - c % TP, c - c % TP + TP)} - set(culprits)
    for r in range(lo, min(lo + 64, world)):
        prog = program(r, world, groups, calls)
        if r in culprits:  # never reaches its tensor-parallel reduce-scatter
            reached, completed = calls - 2, calls - 2
        elif r in tp_peers:  # waits in that reduce-scatter
            reached, completed = calls - 1, calls - 2
        else:  # moved on: waits in the world all-reduce
            reached, completed = calls, calls - 1
        d = rank_dump(r, groups, prog, reached, completed, buffer=entries)
        with open(os.path.join(out, f"_dump_{r}"), "wb") as fh:
            pickle.dump(d, fh, protocol=2)


def generate(world: int, entries: int, culprits: list[int], out: str, jobs: int) -> None:
    tasks = [(world, entries, lo, culprits, out) for lo in range(0, world, 64)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(_write, tasks))


def _timed(fn):  # type: ignore[no-untyped-def]
    gc.collect()
    t = time.perf_counter()
    value = fn()
    return time.perf_counter() - t, value


def baseline_load(directory: str) -> int:
    gc.disable()
    try:
        n = 0
        for name in os.listdir(directory):
            with open(os.path.join(directory, name), "rb") as fh:
                n += len(pickle.load(fh)["entries"])
        return n
    finally:
        gc.enable()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--tmp", default=None, help="directory for the generated dumps")
    args = ap.parse_args()
    print(f"cpus={os.cpu_count()} entries/rank={args.entries} workers={args.workers}")
    header = (
        f"{'ranks':>6} {'entries':>10} {'MB':>7} {'baseline':>9} {'read_1p':>8} "
        f"{'read_Np':>8} {'analyze':>8} {'total_Np':>8} {'ratio':>6} {'ms/rank':>8}  culprits"
    )
    print(header)
    rows = []
    for world in args.ranks:
        culprits = [world // 3, world - 3]
        with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
            generate(world, args.entries, culprits, tmp, args.workers)
            size = sum(os.path.getsize(os.path.join(tmp, n)) for n in os.listdir(tmp)) / 1e6
            t_base, n_entries = _timed(lambda tmp=tmp: baseline_load(tmp))
            t_read1, _ = _timed(lambda tmp=tmp: read_paths([tmp], workers=1))
            t_readn, ds = _timed(lambda tmp=tmp: read_paths([tmp], workers=args.workers))
            t_an, result = _timed(lambda ds=ds: analyze(ds))
        ok = result["culprit_ranks"] == sorted(culprits)
        total = t_readn + t_an
        rows.append((world, total))
        print(
            f"{world:>6} {n_entries:>10} {size:>7.0f} {t_base:>9.2f} {t_read1:>8.2f} "
            f"{t_readn:>8.2f} {t_an:>8.2f} {total:>8.2f} {(t_read1 + t_an) / t_base:>6.2f} "
            f"{total / world * 1000:>8.2f}  {result['culprit_ranks']}{'' if ok else ' WRONG'}",
            flush=True,
        )
        if not ok:
            print(f"expected culprits {sorted(culprits)}", file=sys.stderr)
            return 1
    if len(rows) > 1:
        (w0, t0), (w1, t1) = rows[0], rows[-1]
        print(f"growth {w0}->{w1} ranks: x{w1 / w0:.0f} ranks, x{t1 / t0:.2f} time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
