"""`relaunch demo`: run the main job end to end on this machine and explain what happened.

A real 2-rank gloo training job (`launcher/demo/train.py`) under `relaunch run` with the
embedded defaults (SQLite history, in-process analyzer, CPU workers): an infrastructure-like
fault is restarted from the checkpoint, a recurring workload bug is stopped by the verdict.
Prints each cycle's verdict and where the logs, the database and the audit files are.
Exit 0 when the job was stopped by a STOP verdict after at least one RESTART (the story).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
from pathlib import Path

from relaunch.cli.errors import UserError
from relaunch.restart_agent.model import Decision

DEMO_SCRIPT = Path(__file__).resolve().parent.parent / "launcher" / "demo" / "train.py"


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--workdir", default="relaunch-demo", help="work dir (default ./relaunch-demo)")
    p.add_argument("--iterations", type=int, default=40, help="training iterations (default 40)")
    p.add_argument("--max-restarts", type=int, default=5, help="restart budget (default 5)")
    p.add_argument("--quiet", action="store_true", help="only the summary")
    return p


def run(args: argparse.Namespace) -> int:
    from relaunch.launcher import config
    from relaunch.launcher.agent import EXIT_STOPPED, launch

    if args.iterations < 30:
        raise UserError("--iterations must be >= 30 (the workload bug sits at iteration 23)")
    work = Path(args.workdir).resolve()
    if work.exists() and not work.is_dir():
        raise UserError(f"--workdir {work} exists and is not a directory")
    shutil.rmtree(work / "checkpoints", ignore_errors=True)  # each demo starts from scratch
    work.mkdir(parents=True, exist_ok=True)
    job_id = time.strftime("demo-%Y%m%d-%H%M%S")
    settings = config.resolve(
        {
            "script": str(DEMO_SCRIPT),
            "script_args": ["--workdir", str(work), "--iterations", str(args.iterations)],
            "nproc_per_node": 2,
            "job_id": job_id,
            "log_dir": str(work / "logs"),
            "max_restarts": args.max_restarts,
            "ft_db_url": f"sqlite:///{work / 'relaunch.db'}",
            "ft_audit_dir": str(work / "audit"),
            "ft_heartbeat_timeout": 30.0,
            "ft_initial_heartbeat_timeout": 120.0,
            "workers_stop_timeout": 5.0,
            "ft_gpu_health": "off",
            "redirects": "3",  # worker output stays in the cycle logs; the demo tells the story
            # the demo's story ends with a STOP that ends the job: it opts in to acting
            "ft_attribution_stop_action": "no-restart",
        }
    )
    print(f"relaunch demo: job {job_id}: 2 ranks, gloo on CPU, work dir {work}", flush=True)
    # elastic's own warnings (closing signals, per-failure errors) only repeat what the
    # launcher's lines say; the demo keeps its output to the story
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    if args.quiet:
        with open(work / "launcher.out", "w") as out:
            result = launch(settings, out=out)
    else:
        result = launch(settings, out=sys.stdout)
    code, verdicts = result.exit_code, result.verdicts
    print("\nrelaunch demo: verdicts")
    for cycle in sorted(verdicts):
        v = verdicts[cycle]
        rule = f" [{v.rule}]" if v.rule else ""
        print(f"  cycle {cycle}: {v.decision}{rule}: {v.reason}")
    job_dir = settings.job_dir.resolve()
    print("\nrelaunch demo: checkpoints (asynchronous, relaunch.checkpoint)")
    for line in _checkpoint_story(job_dir):
        print(f"  {line}")
    from relaunch.attribution.core.audit import artifact_path

    # this run's artifacts only: a reused --workdir keeps earlier demos' jobs
    audits = [
        p for c in sorted(verdicts) if (p := artifact_path(work / "audit", job_id, c)).is_file()
    ]
    print(f"\n  exit code       {code}" + (" (stopped by verdict)" if code == EXIT_STOPPED else ""))
    print(f"  cycle logs      {job_dir}/cycle_<N>.log")
    print(f"  database        {settings.db_url()}")
    audit_dir = artifact_path(work / "audit", job_id, 0).parent
    print(f"  audit files     {audit_dir} ({len(audits)} files)")
    print(f"  dashboard       relaunch serve --db {settings.db_url()}  ->  http://127.0.0.1:8570/")
    decisions = result.decisions
    ok = (
        code == EXIT_STOPPED and Decision.RESTART in decisions and decisions[-1:] == [Decision.STOP]
    )
    if not ok:
        print("relaunch demo: the job did not end as the demo expects (RESTART, then STOP)")
        return 1
    return 0


def _checkpoint_story(job_dir: Path) -> list[str]:
    """Per cycle: the checkpoints that became complete and where the cycle resumed from."""
    import json
    import re

    out = []
    logs = sorted(job_dir.glob("cycle_*.log"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    for path in logs:
        steps, resumed = [], "stopped before it loaded a checkpoint"
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith('[relaunch] fact: {"fact":"checkpoint"'):
                steps.append(str(json.loads(line.split("fact: ", 1)[1])["step"]))
            elif "no checkpoint: starting from scratch" in line:
                resumed = "started from scratch"
            elif "resumed from checkpoint step" in line:
                resumed = "resumed from " + line.split("resumed from ", 1)[1].split(" (")[0]
        done = ", ".join(steps) or "none"
        out.append(f"{path.stem}: {resumed}; checkpoints completed: {done}")
    return out
