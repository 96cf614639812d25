"""Benchmark of the dashboard's job page on a long job, and of the Slack listener's cost.

Run from the repository root: `python bench/bench_dashboard.py [--cycles N] [--repeat R]`.
Prints one JSON object. Every figure is a ratio against a baseline measured in the same
process on the same SQLite history (N cycles of one job, real `Verdict.to_dict()` JSON):

- timeline: `storage.dashboard_queries.timeline` (summary columns, last 1000 cycles)
  against `HistoryRepository.list_cycles` (full records with the verdict JSON), the read
  the job page would otherwise need;
- job_page: a GET of `/jobs/{job}` (uvicorn on 127.0.0.1, full page with the SVG plot)
  against a GET of `/static/style.css` (the server's fixed per-request cost) and against
  the baseline read alone; and the live refresh of an unchanged job (`If-None-Match`,
  answered 304) against the full page;
- slack_listener: one `SlackNotifier(event)` call (what the engine's listener thread pays)
  against one `chat_postMessage` to a loopback Slack-compatible server (what it would pay
  if the post were made inline).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from _timing import timed_median  # noqa: E402  (bench/ is on sys.path as the script dir)

from relaunch import storage  # noqa: E402
from relaunch.attribution.notify.slack import SlackConfig, SlackNotifier  # noqa: E402
from relaunch.storage import dashboard_queries  # noqa: E402
from tests._slack_server import SlackServer  # noqa: E402
from tests._web_helpers import DashboardServer, _ev, make_verdict  # noqa: E402

JOB = "bench-job"


def _seed(repo: Any, cycles: int) -> None:
    ev = _ev(
        120,
        "nccl_network_error",
        "NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0",
        rank=5,
        domain="infrastructure",
    )
    for n in range(cycles):
        v = make_verdict("RESTART", "infra_restart", ev, iteration=100 * (n + 1), same_root=n % 4)
        repo.register_cycle(JOB, n, f"/logs/{JOB}/cycle_{n}.log", node="node-a")
        repo.save_verdict(JOB, n, v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    out: dict[str, Any] = {"cycles": args.cycles, "repeat": args.repeat}
    with tempfile.TemporaryDirectory() as tmp:
        repo = storage.open_repository(f"sqlite:///{tmp}/bench.db")
        t0 = time.perf_counter()
        _seed(repo, args.cycles)
        out["seed_s"] = round(time.perf_counter() - t0, 2)

        base = timed_median(lambda: repo.list_cycles(JOB), args.repeat)
        light = timed_median(lambda: dashboard_queries.timeline(repo, JOB, 1000), args.repeat)
        out["timeline"] = {
            "list_cycles_ms": round(base * 1e3, 2),
            "dashboard_timeline_ms": round(light * 1e3, 2),
            "speedup": round(base / light, 2),
        }

        with DashboardServer(repo) as server, httpx.Client(base_url=server.base_url) as c:
            page = c.get(f"/jobs/{JOB}")
            assert page.status_code == 200 and 'id="timeline"' in page.text
            static = timed_median(lambda: c.get("/static/style.css"), args.repeat)
            job_page = timed_median(lambda: c.get(f"/jobs/{JOB}"), args.repeat)
            etag = page.headers["etag"]
            revalidate = timed_median(
                lambda: c.get(f"/jobs/{JOB}", headers={"If-None-Match": etag}), args.repeat
            )
            cycle_page = timed_median(
                lambda: c.get(f"/jobs/{JOB}/cycles/{args.cycles - 1}"), args.repeat
            )
        out["job_page"] = {
            "job_page_ms": round(job_page * 1e3, 2),
            "page_bytes": len(page.content),
            "unchanged_revalidate_ms": round(revalidate * 1e3, 2),
            "full_over_revalidate": round(job_page / revalidate, 1),
            "cycle_page_ms": round(cycle_page * 1e3, 2),
            "static_request_ms": round(static * 1e3, 2),
            "vs_static_request": round(job_page / static, 2),
            "vs_list_cycles_read_alone": round(job_page / base, 2),
        }
        repo.close()

    verdict = make_verdict(
        "STOP",
        "stop.certain_workload_bug",
        _ev(3, "python_syntax_error", "SyntaxError: x"),
        iteration=None,
    )
    with SlackServer("xoxb-bench") as slack:
        cfg = SlackConfig(
            token="xoxb-bench", channel="#b", base_url=slack.base_url, per_job_burst=10**9
        )
        notifier = SlackNotifier(cfg)
        post = timed_median(
            lambda: notifier.client.chat_postMessage(channel="#b", text="bench"), args.repeat
        )
        counter = iter(range(10**9))
        listener = timed_median(
            lambda: notifier({"job_id": f"j{next(counter)}", "cycle": 0, "verdict": verdict}),
            args.repeat * 10,
        )
        notifier.flush(60)
        notifier.close()
    out["slack_listener"] = {
        "listener_call_us": round(listener * 1e6, 1),
        "inline_post_ms": round(post * 1e3, 2),
        "inline_post_over_listener": round(post / listener, 1),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
