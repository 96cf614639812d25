"""Benchmark: one cycle of a simulated multi-node job, from the last node's end to the verdict.

Generates (untimed) N node logs of a cycle (default 256 nodes x 4 MB, 8 ranks per node),
shaped like relaunch's cycle logs: the launcher's `cycle_start` fact, rank-prefixed
training output, and on one node a rank's ValueError traceback with the launcher's exit
facts. Then, with the service's real parts in this process (a SQLite history, the
`AttributionEngine`, `attribution.service.gather.CycleGather` with its thread pool):

- registers every node's log and reports the end of all nodes but the last (untimed: in a
  real job these arrive while the other nodes still finish);
- times the last node's end (its log hashed) until the one verdict is saved and readable
  by every node (`CycleGather.status` -> `completed`);
- baseline: `AttributionEngine.analyze_cycle` of one node's log (4 MB), same process.

Prints both, their ratio and the merged throughput (MB/s over all logs).

    python bench/multinode_bench.py                          # 256 nodes x 4 MB
    python bench/multinode_bench.py --nodes 16 --mb 1        # quick
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_node_log(path: Path, node: int, ranks_per_node: int, size: int, culprit: int) -> None:
    """A node's cycle log of about `size` bytes; node `culprit` holds the root failure."""
    first = node * ranks_per_node
    ranks = list(range(first, first + ranks_per_node))
    world = ranks_per_node * 1_000_000  # only used in the fact's world_size
    head = [
        f"[relaunch] cycle 0 start: job=bench node={node} ranks={ranks[0]}..{ranks[-1]}",
        "[relaunch] fact: "
        + json.dumps(
            {
                "fact": "cycle_start",
                "cycle": 0,
                "job": "bench",
                "node": node,
                "ranks": ranks,
                "world_size": world,
                "t": 1_796_283_413.0 + node * 0.001,
            },
            separators=(",", ":"),
        ),
    ]
    body = "\n".join(head) + "\n"
    line_no = 0
    chunks = [body]
    total = len(body)
    while total < size:
        r = ranks[line_no % len(ranks)]
        line = (
            f"[rank{r}]: iteration {line_no // len(ranks):8d} | loss 2.{line_no % 997:03d} | "
            f"lr 3.0e-4 | grad_norm 1.{line_no % 89:02d} | tokens/s 18234.5 | mem 61.2 GB\n"
        )
        chunks.append(line)
        total += len(line)
        line_no += 1
    if node == culprit:
        r = ranks[3]
        chunks += [
            f"[rank{r}]: Traceback (most recent call last):\n",
            f'[rank{r}]:   File "/app/train.py", line 212, in <module>\n',
            f"[rank{r}]:     build_model(cfg)\n",
            f"[rank{r}]: ValueError: bad config value for layer 7\n",
            "[relaunch] fact: "
            + json.dumps(
                {
                    "fact": "rank_exit",
                    "cycle": 0,
                    "rank": r,
                    "local_rank": 3,
                    "node": node,
                    "exitcode": 1,
                    "first": True,
                    "t_s": 812.0,
                },
                separators=(",", ":"),
            )
            + "\n",
            f"[relaunch] rank {r} exited with code 1\n",
        ]
    path.write_text("".join(chunks))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--mb", type=float, default=4.0, help="MB per node log")
    ap.add_argument("--ranks-per-node", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2, help="analysis threads of the service")
    args = ap.parse_args()

    from relaunch.attribution.core.engine import AttributionEngine
    from relaunch.attribution.service.gather import CycleGather
    from relaunch.storage import open_repository

    size = int(args.mb * 1_000_000)
    culprit = args.nodes // 2 + 1
    with tempfile.TemporaryDirectory(prefix="relaunch-mn-bench-") as tmp:
        root = Path(os.path.realpath(tmp))
        logs = root / "logs" / "bench"
        logs.mkdir(parents=True)
        t0 = time.perf_counter()
        paths = []
        for k in range(args.nodes):
            p = logs / f"cycle_0.node{k}.log"
            write_node_log(p, k, args.ranks_per_node, size, culprit)
            paths.append(p)
        gen_s = time.perf_counter() - t0
        total_mb = sum(p.stat().st_size for p in paths) / 1e6
        print(f"generated {args.nodes} node logs, {total_mb:,.0f} MB in {gen_s:.1f} s")

        repo = open_repository(f"sqlite:///{root / 'h.db'}")
        engine = AttributionEngine(repo)
        pool = ThreadPoolExecutor(max_workers=args.workers)

        def opener(path: str) -> int:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)

        gather = CycleGather(repo, engine, pool, [root], opener, node_wait_s=3600)
        for k, p in enumerate(paths):
            gather.register(
                "bench", 0, f"node{k}", str(p), nodes=args.nodes, group_rank=k, host=None
            )
        for k in range(args.nodes - 1):
            gather.end("bench", 0, f"node{k}", "failed")

        # timed: the last node's end until every node can read the verdict
        t0 = time.perf_counter()
        gather.end("bench", 0, f"node{args.nodes - 1}", "failed")
        while True:
            st = gather.status("bench", 0)
            if st["status"] in ("completed", "failed"):
                break
            time.sleep(0.005)
        merged_s = time.perf_counter() - t0
        verdict = st["verdict"] or {}
        primary = verdict.get("primary") or {}

        # baseline: one node's log, analysed alone (same engine, same process)
        t0 = time.perf_counter()
        engine.analyze_cycle("bench-one", 0, str(paths[culprit]))
        one_s = time.perf_counter() - t0
        pool.shutdown()
        engine.close()
        repo.close()

    print(
        f"verdict: {verdict.get('decision')} rank {primary.get('rank')} node "
        f"{primary.get('node')}; ranks_seen {verdict.get('fan_out', {}).get('ranks_seen')}"
    )
    print(
        f"last node's end -> verdict on every node: {merged_s:.2f} s "
        f"({total_mb / merged_s:,.0f} MB/s over {args.nodes} logs)"
    )
    print(f"baseline, one node's log ({size / 1e6:.0f} MB) alone: {one_s * 1000:.0f} ms")
    print(f"ratio: {merged_s / one_s:.1f}x the one-node analysis for {args.nodes}x the bytes")
    return 0 if st["status"] == "completed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
