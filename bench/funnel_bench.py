"""Benchmark of the log funnel against a local-file baseline, measured in the same run.

`python bench/funnel_bench.py [--lines N] [--nodes K]` prints JSON: lines/s of a plain
local append (what `FileSink` does), of one `FunnelSink` streaming over loopback to an
in-process `FunnelServer`, and of K node processes streaming to one shared file, plus the
ratios to the baseline. Also times one health `preflight` (GPU checks, no service).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from relaunch.launcher.funnel.client import FunnelSink
from relaunch.launcher.funnel.server import FunnelServer

REPO_ROOT = Path(__file__).resolve().parent.parent


def _lines(n: int, node: str = "n0") -> list[str]:
    return [f"[rank {i % 8}]: {node} step {i} loss=0.{i % 9973:04d} " + "x" * 60 for i in range(n)]


def bench_local(path: Path, lines: list[str]) -> float:
    t0 = time.perf_counter()
    with open(path, "a", encoding="utf-8", errors="replace", newline="\n") as fh:
        for line in lines:
            fh.write(line + "\n")
    return time.perf_counter() - t0


def bench_funnel(root: Path, lines: list[str]) -> float:
    with FunnelServer(root) as server:
        t0 = time.perf_counter()
        sink = FunnelSink(server.address, "one.log", node_id="n0")
        for line in lines:
            sink.write_line(line)
        sink.close()
        elapsed = time.perf_counter() - t0
    assert sink.summary is not None and sink.summary["lines_written"] == len(lines)
    return elapsed


def bench_nodes(root: Path, n_lines: int, nodes: int) -> float:
    payloads = {
        f"n{k}": ("\n".join(_lines(n_lines, f"n{k}")) + "\n").encode() for k in range(nodes)
    }
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    with FunnelServer(root) as server:
        procs = {
            node: subprocess.Popen(
                [sys.executable, "-m", "relaunch.launcher.funnel", "send", "--address", server.address,
                 "--path", "shared.log", "--node-id", node],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            )
            for node in payloads
        }  # fmt: skip
        # Time the streaming, not interpreter start-up: wait until every node's stream is open.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                users = sum(f.users for f in list(server._files._by_path.values()))
            except RuntimeError:  # changed while copied on the server thread; look again
                users = 0
            if users >= nodes:
                break
            time.sleep(0.01)
        t0 = time.perf_counter()
        threads = [
            threading.Thread(target=procs[node].communicate, args=(data,))
            for node, data in payloads.items()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        stats = server.stats()
    assert all(p.returncode == 0 for p in procs.values())
    assert sum(stats["lines_by_node"].values()) == n_lines * nodes
    return elapsed


def bench_preflight(repeat: int = 5) -> float:
    from relaunch.launcher.health import NvmlOptions, preflight

    t0 = time.perf_counter()
    for _ in range(repeat):
        preflight(nvml_options=NvmlOptions(window_s=0.0, samples=1))
    return (time.perf_counter() - t0) / repeat


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/funnel_bench.py", description=__doc__)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--nodes", type=int, default=4)
    ns = parser.parse_args(argv)
    lines = _lines(ns.lines)
    with tempfile.TemporaryDirectory(prefix="rl-bench-") as tmp:
        base = Path(tmp)
        local_s = bench_local(base / "local.log", lines)
        funnel_s = bench_funnel(base / "funnel", lines)
        per_node = max(1, ns.lines // ns.nodes)
        nodes_s = bench_nodes(base / "nodes", per_node, ns.nodes)
    local_rate = ns.lines / local_s
    funnel_rate = ns.lines / funnel_s
    nodes_rate = per_node * ns.nodes / nodes_s
    print(
        json.dumps(
            {
                "lines": ns.lines,
                "local_file_lines_per_s": round(local_rate),
                "funnel_one_sink_lines_per_s": round(funnel_rate),
                "funnel_one_sink_ratio_to_local": round(funnel_rate / local_rate, 3),
                "nodes": ns.nodes,
                "funnel_nodes_aggregate_lines_per_s": round(nodes_rate),
                "funnel_nodes_ratio_to_local": round(nodes_rate / local_rate, 3),
                "preflight_no_gpu_ms": round(bench_preflight() * 1000, 3),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
