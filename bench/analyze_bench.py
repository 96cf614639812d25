"""Benchmark of the deterministic restart agent on a large interleaved multi-rank log.

Generates (once, cached in --workdir) a log of --size bytes written by --ranks ranks with
realistic noise and a CUDA-error / NCCL-watchdog cascade near the end, then measures in
this same script:

- the agent: `restart_agent.analyze_file` in a child process (wall time, throughput,
  peak RSS of the child from `resource.getrusage(RUSAGE_CHILDREN)`), and checks the verdict;
- the baseline: `grep -E -c` over the same file with the registry's trigger literals
  (what a person would grep for), after one warm-up read so both run from the page cache.

Prints one JSON object (and a human summary on stderr). Usage:

    python bench/analyze_bench.py                 # 1 GiB, 1024 ranks, in /tmp
    python bench/analyze_bench.py --size 100M --ranks 256 --workdir /tmp/bench
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = """
import json, sys, time
t0 = time.perf_counter()
from restart_agent import analyze_file
v = analyze_file(sys.argv[1])
d = v.to_dict()
print(json.dumps({"seconds": time.perf_counter() - t0, "scan_seconds": d["scan"]["seconds"],
                  "decision": d["decision"], "rule": d["rule"], "primary": d["primary"],
                  "ranks_seen": d["fan_out"]["ranks_seen"], "lines": d["scan"]["lines"],
                  "cascades": [(c["failure_class"], c["count"], len(c["ranks"])) for c in d["cascades"]]}))
"""


def _size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMG]?)i?B?", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1G, 100M, 65536)")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def _make_logs():
    spec = importlib.util.spec_from_file_location(
        "make_logs", ROOT / "tests" / "fixtures" / "make_logs.py"
    )
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _agent(path: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - t0
    rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = json.loads(proc.stdout)
    out["wall_seconds"] = wall
    out["peak_rss_mb"] = round(max(rss_kb, before) / 1024, 1)
    return out


def _grep(path: Path, triggers: tuple[str, ...]) -> tuple[float, int]:
    pattern = "|".join(re.sub(r"([.[\]()*+?{}|^$\\])", r"\\\1", t) for t in triggers)
    cmd = ["grep", "-a", "-E", "-c", pattern, str(path)]
    env = {**os.environ, "LC_ALL": "C"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"grep failed: {proc.stderr.strip()}")
    return dt, int(proc.stdout.strip() or 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=_size, default=1 << 30, help="log size (default 1G)")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/relaunch-bench"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="agent runs; the best is reported")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from restart_agent.registry import default_registry

    args.workdir.mkdir(parents=True, exist_ok=True)
    path = args.workdir / f"bench_{args.size}_{args.ranks}r_s{args.seed}.log"
    if not path.exists() or path.stat().st_size < args.size * 0.99:
        t0 = time.perf_counter()
        tmp = path.with_suffix(".tmp")
        _make_logs().write_log(tmp, args.size, ranks=args.ranks, seed=args.seed)
        tmp.replace(path)
        print(f"generated {path} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    size = path.stat().st_size
    triggers = default_registry().prefilter
    _grep(path, triggers)  # warm the page cache
    grep_s, grep_count = _grep(path, triggers)
    runs = [_agent(path) for _ in range(max(1, args.repeat))]
    best = min(runs, key=lambda r: r["wall_seconds"])
    primary = best["primary"] or {}
    ok = (
        best["decision"] == "RESTART"
        and primary.get("failure_class") == "cuda_illegal_memory_access"
    )
    result = {
        "file": str(path),
        "bytes": size,
        "ranks": args.ranks,
        "lines": best["lines"],
        "agent_wall_seconds": round(best["wall_seconds"], 3),
        "agent_scan_seconds": round(best["scan_seconds"], 3),
        "agent_mb_per_s": round(size / 1e6 / best["wall_seconds"], 1),
        "agent_peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "grep_seconds": round(grep_s, 3),
        "grep_mb_per_s": round(size / 1e6 / grep_s, 1),
        "grep_matching_lines": grep_count,
        "ratio_agent_over_grep": round(best["wall_seconds"] / grep_s, 2),
        "decision": best["decision"],
        "rule": best["rule"],
        "primary": {k: primary.get(k) for k in ("failure_class", "rank", "line")},
        "ranks_seen": best["ranks_seen"],
        "verdict_as_expected": ok,
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=2))
    print(
        f"agent {result['agent_wall_seconds']}s ({result['agent_mb_per_s']} MB/s, "
        f"{result['agent_peak_rss_mb']} MB RSS) vs grep -E -c {result['grep_seconds']}s: "
        f"ratio {result['ratio_agent_over_grep']}x; verdict {best['decision']} {best['rule']}",
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
