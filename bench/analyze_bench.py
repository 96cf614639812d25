"""Benchmark of the deterministic restart agent on a large interleaved multi-rank log.

Generates (once, cached in --workdir) a log of --size bytes written by --ranks ranks, of
one --shape, with a CUDA-error / NCCL-watchdog cascade at the end:

- `default`: realistic noise (tests/fixtures/make_logs.write_log; 1 GiB by default),
- `noisy`: 20% warning lines holding "error" substrings, 40% progress, 40% NCCL INFO
  (bench/log_shapes.py; 200 MB by default), `distinct` (every line a distinct error line,
  issue 26: the log that held analysis workers for minutes; 12 MB by default),
- `dense`: nothing but tracebacks and error lines of every rank (64 MB by default),

then measures in this same script:

- the agent: `restart_agent.analyze_file` in a child process (wall time, throughput,
  peak RSS of the child from `resource.getrusage(RUSAGE_CHILDREN)`), and checks the verdict;
  the child's bytecode is compiled once before the timed runs (under --workdir/pycache,
  also where PYTHONDONTWRITEBYTECODE is set), as an installed analyzer has its .pyc files;
- the baseline: `grep -E -c` over the same file with the registry's trigger literals
  (what a person would grep for), after one warm-up read so both run from the page cache.
  Its count is the number of "matching lines"; lines/s = that count / agent wall time.

--repeat N runs both N times and reports the medians. Wall time and CPU time (user +
system of the child, i.e. one core's work, which a loaded shared machine inflates far less
than wall time) are both reported, as MB/s and lines/s. Prints one JSON object (and a
human summary on stderr). Usage:

    python bench/analyze_bench.py                 # 1 GiB, 1024 ranks, in /tmp
    python bench/analyze_bench.py --shape noisy --repeat 3
    python bench/analyze_bench.py --size 100M --ranks 256 --workdir /tmp/bench
    RELAUNCH_NATIVE_SCAN=0 python bench/analyze_bench.py --shape dense   # stdlib passes

The child uses the native literal pass (restart_agent.multiscan) where `hyperscan` is
installed; RELAUNCH_NATIVE_SCAN=0 in the environment measures the stdlib fallback.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = """
import json, sys, time
t0 = time.perf_counter()
from relaunch.restart_agent.policy import decide
from relaunch.restart_agent.scanner import scan_file
t1 = time.perf_counter()
ev = scan_file(sys.argv[1])
t2 = time.perf_counter()
d = decide(ev, ()).to_dict()
print(json.dumps({"seconds": time.perf_counter() - t0, "scan_seconds": t2 - t1,
                  "decision": d["decision"], "rule": d["rule"], "primary": d["primary"],
                  "ranks_seen": d["fan_out"]["ranks_seen"], "lines": d["scan"]["lines"],
                  "pattern_lines": ev.root_lines + sum(c.count for c in ev.cascades),
                  "cascades": [(c["failure_class"], c["count"], len(c["ranks"])) for c in d["cascades"]]}))
"""


def _size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMG]?)i?B?", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1G, 100M, 65536)")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def _shapes():
    spec = importlib.util.spec_from_file_location("log_shapes", ROOT / "bench" / "log_shapes.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


DEFAULT_SIZE = {
    "default": 1 << 30,
    "noisy": 200 * 10**6,
    "dense": 64 * 10**6,
    "distinct": 12 * 10**6,
}


def _cpu() -> float:
    """CPU seconds used by the waited-for children so far (user + system)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _child_env(workdir: Path) -> dict[str, str]:
    """The analysing child's environment: this tree's code, with its compiled bytecode
    kept under `workdir` (an installed analyzer has its .pyc files; where the shell sets
    PYTHONDONTWRITEBYTECODE, every child would otherwise compile ~20 modules, ~0.03 s)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    return env


def _warm_bytecode(env: dict[str, str]) -> None:
    """Import what the child imports once, untimed, so the timed runs find the .pyc files
    (as `grep` runs once to warm the page cache)."""
    code = "import restart_agent.policy, restart_agent.scanner"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)


def _agent(path: Path, env: dict[str, str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    c0 = _cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - t0
    rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = json.loads(proc.stdout)
    out["wall_seconds"] = wall
    out["cpu_seconds"] = _cpu() - c0
    out["peak_rss_mb"] = round(max(rss_kb, before) / 1024, 1)
    return out


def _grep(path: Path, triggers: tuple[str, ...]) -> tuple[float, float, int]:
    pattern = "|".join(re.sub(r"([.[\]()*+?{}|^$\\])", r"\\\1", t) for t in triggers)
    cmd = ["grep", "-a", "-E", "-c", pattern, str(path)]
    env = {**os.environ, "LC_ALL": "C"}
    c0 = _cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"grep failed: {proc.stderr.strip()}")
    return dt, _cpu() - c0, int(proc.stdout.strip() or 0)


def _expected(shape: str, run: dict) -> bool:
    """The verdict each shape must give (the analysis is checked, not only timed)."""
    primary = run["primary"] or {}
    if shape == "dense":  # every rank failed: some rank's error is named, the job restarts
        return run["decision"] == "RESTART" and primary.get("rank") is not None
    if shape == "distinct":  # thousands of distinct errors: a verdict naming one of them
        return run["decision"] in ("RESTART", "STOP") and primary.get("failure_class") is not None
    return (
        run["decision"] == "RESTART"
        and primary.get("failure_class") == "cuda_illegal_memory_access"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(DEFAULT_SIZE), default="default")
    ap.add_argument("--size", type=_size, help="log size (default: 1G, noisy 200M, dense 64M)")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/relaunch-bench"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each; medians are reported")
    args = ap.parse_args(argv)
    size_wanted = args.size or DEFAULT_SIZE[args.shape]
    sys.path.insert(0, str(ROOT))
    from relaunch.restart_agent.registry import default_registry

    args.workdir.mkdir(parents=True, exist_ok=True)
    shape = "" if args.shape == "default" else f"{args.shape}_"
    path = args.workdir / f"bench_{shape}{size_wanted}_{args.ranks}r_s{args.seed}.log"
    if not path.exists() or path.stat().st_size < size_wanted * 0.99:
        t0 = time.perf_counter()
        tmp = path.with_suffix(".tmp")
        if args.shape == "default":
            _shapes().make_logs().write_log(tmp, size_wanted, ranks=args.ranks, seed=args.seed)
        else:
            _shapes().WRITERS[args.shape](tmp, size_wanted, ranks=args.ranks, seed=args.seed)
        tmp.replace(path)
        print(f"generated {path} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    size = path.stat().st_size
    triggers = default_registry().prefilter
    _grep(path, triggers)  # warm the page cache
    repeat = max(1, args.repeat)
    greps = [_grep(path, triggers) for _ in range(repeat)]
    grep_s = statistics.median(g[0] for g in greps)
    grep_cpu = statistics.median(g[1] for g in greps)
    grep_count = greps[0][2]
    env = _child_env(args.workdir)
    _warm_bytecode(env)
    runs = [_agent(path, env) for _ in range(repeat)]
    wall = statistics.median(r["wall_seconds"] for r in runs)
    cpu = statistics.median(r["cpu_seconds"] for r in runs)
    first = runs[0]
    primary = first["primary"] or {}
    ok = all(_expected(args.shape, r) for r in runs)
    result = {
        "shape": args.shape,
        "file": str(path),
        "bytes": size,
        "ranks": args.ranks,
        "lines": first["lines"],
        "repeat": repeat,
        "agent_wall_seconds": round(wall, 3),
        "agent_wall_seconds_all": [round(r["wall_seconds"], 3) for r in runs],
        "agent_scan_seconds": round(statistics.median(r["scan_seconds"] for r in runs), 3),
        "agent_cpu_seconds": round(cpu, 3),
        "agent_cpu_seconds_all": [round(r["cpu_seconds"], 3) for r in runs],
        "agent_cpu_seconds_min": round(min(r["cpu_seconds"] for r in runs), 3),
        "agent_mb_per_s": round(size / 1e6 / wall, 1),
        "agent_mb_per_cpu_s": round(size / 1e6 / cpu, 1),
        "agent_matching_lines_per_s": round(grep_count / wall),
        "agent_matching_lines_per_cpu_s": round(grep_count / cpu),
        "agent_pattern_lines_per_s": round(first["pattern_lines"] / wall),
        "agent_peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "grep_seconds": round(grep_s, 3),
        "grep_cpu_seconds": round(grep_cpu, 3),
        "grep_mb_per_s": round(size / 1e6 / grep_s, 1),
        "grep_matching_lines": grep_count,
        "pattern_lines": first["pattern_lines"],
        "ratio_agent_over_grep": round(wall / grep_s, 2),
        "ratio_agent_over_grep_cpu": round(cpu / max(grep_cpu, 1e-3), 2),
        "decision": first["decision"],
        "rule": first["rule"],
        "primary": {k: primary.get(k) for k in ("failure_class", "rank", "line")},
        "ranks_seen": first["ranks_seen"],
        "verdict_as_expected": ok,
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=2))
    print(
        f"[{args.shape}] agent {result['agent_wall_seconds']}s wall"
        f" ({result['agent_mb_per_s']} MB/s, {result['agent_matching_lines_per_s']} matching"
        f" lines/s), {result['agent_cpu_seconds']}s CPU ({result['agent_mb_per_cpu_s']} MB/s,"
        f" {result['agent_matching_lines_per_cpu_s']} lines/s on one core; min"
        f" {result['agent_cpu_seconds_min']}s),"
        f" {result['agent_peak_rss_mb']} MB RSS; grep -E -c {result['grep_seconds']}s wall"
        f" {result['grep_cpu_seconds']}s CPU: ratio {result['ratio_agent_over_grep']}x wall,"
        f" {result['ratio_agent_over_grep_cpu']}x CPU; verdict {first['decision']}"
        f" {first['rule']}; load {result['load_average']:.2f}",
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
