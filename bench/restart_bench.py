"""Restart latency: a worker's death to the next cycle's workers running, relaunch vs torchrun.

One run, same machine, same worker script, side by side (trials interleaved):

- `torchrun`          python -m torch.distributed.run --standalone (the baseline)
- `relaunch`          relaunch run, default embedded attribution (analysis on)
- `relaunch-off`      relaunch run --ft-attribution-endpoint off (no analysis)

The worker (2 ranks, no torch import so the launcher dominates) records `time.time()` as
its first statement; in cycle 0 rank 0 runs `--die-after` seconds (default 5), records its
death time and SIGKILLs itself. The
restart latency is start(cycle 1, first rank) - death(cycle 0). Reported: median and
min over trials, and the ratios relaunch/torchrun (target <= 1.10) and
relaunch/relaunch-off (analysis must add nothing to the restart path).

    python bench/restart_bench.py [--trials 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

WORKER = r"""
import os, sys, time
t0 = time.time()
out = sys.argv[1]
cycle = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
rank = int(os.environ["RANK"])
with open(out, "a") as fh:
    fh.write(f"start {cycle} {rank} {t0!r}\n")
if cycle == 0:
    if rank == 0:
        time.sleep(float(sys.argv[2]))
        with open(out, "a") as fh:
            fh.write(f"death {cycle} {rank} {time.time()!r}\n")
        os.kill(os.getpid(), 9)
    time.sleep(60)
"""


def _latency(record: Path) -> float:
    death = None
    starts: list[float] = []
    for line in record.read_text().splitlines():
        kind, cycle, _rank, t = line.split()
        if kind == "death":
            death = float(t)
        elif kind == "start" and cycle == "1":
            starts.append(float(t))
    if death is None or not starts:
        raise RuntimeError(f"incomplete record {record}: {record.read_text()!r}")
    return min(starts) - death


def _command(
    kind: str, script: Path, record: Path, logs: Path, trial: int, die_after: float
) -> list[str]:
    common = ["--nproc-per-node", "2", "--max-restarts", "1", "--monitor-interval", "0.1"]
    if kind == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", *common,
                str(script), str(record), str(die_after)]  # fmt: skip
    extra = ["--ft-attribution-endpoint", "off"] if kind == "relaunch-off" else []
    return [sys.executable, "-m", "relaunch.cli", "run", *common, "--log-dir", str(logs),
            "--job-id", f"{kind}-{trial}", "--ft-gpu-health", "off", "--workers-stop-timeout", "15",
            *extra, str(script), str(record), str(die_after)]  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description="restart latency: relaunch vs torchrun")
    p.add_argument("--trials", type=int, default=7)
    p.add_argument("--json", help="also write the figures here")
    p.add_argument(
        "--die-after",
        type=float,
        default=5.0,
        help="seconds rank 0 runs in cycle 0 before its death (default 5: past the launcher's "
        "one-time start-up work, opening the database, as in a job that has been training)",
    )
    a = p.parse_args()
    kinds = ["torchrun", "relaunch", "relaunch-off"]
    results: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="restart-bench-") as tmp:
        base = Path(tmp)
        script = base / "worker.py"
        script.write_text(WORKER)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
        env["RELAUNCH_HOME"] = str(base / "home")
        for trial in range(a.trials):
            for kind in kinds if trial % 2 == 0 else reversed(kinds):
                record = base / f"{kind}-{trial}.rec"
                cmd = _command(kind, script, record, base / "logs", trial, a.die_after)
                r = subprocess.run(
                    cmd, env=env, cwd=base, capture_output=True, text=True, timeout=120
                )
                if r.returncode != 0:
                    print(f"{kind} trial {trial} exited {r.returncode}:\n{r.stderr[-2000:]}")
                    return 1
                results[kind].append(_latency(record))
    med = {k: statistics.median(v) for k, v in results.items()}
    figures = {
        "trials": a.trials,
        "die_after_s": a.die_after,
        "median_s": med,
        "min_s": {k: min(v) for k, v in results.items()},
        "all_s": results,
        "ratio_relaunch_vs_torchrun": med["relaunch"] / med["torchrun"],
        "ratio_relaunch_off_vs_torchrun": med["relaunch-off"] / med["torchrun"],
        "ratio_analysis_on_vs_off": med["relaunch"] / med["relaunch-off"],
    }
    print(f"restart latency (worker death -> next cycle's first worker running), {a.trials} trials")
    for k in kinds:
        print(
            f"  {k:<13} median {med[k] * 1000:8.1f} ms   min {figures['min_s'][k] * 1000:8.1f} ms"
        )
    print(
        f"  ratio relaunch / torchrun        {figures['ratio_relaunch_vs_torchrun']:.3f} (target <= 1.10)"
    )
    print(f"  ratio relaunch-off / torchrun    {figures['ratio_relaunch_off_vs_torchrun']:.3f}")
    print(
        f"  ratio analysis on / off          {figures['ratio_analysis_on_vs_off']:.3f} (target ~1.0)"
    )
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
