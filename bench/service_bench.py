"""Benchmark of the attribution service (`relaunch serve`), driven over real HTTP.

Run from the repository root::

    python bench/service_bench.py [--jobs 100] [--lookups 5000] [--cycles 1000000]

Prints one JSON object. Figures, each with a baseline measured in the same run:

- lookups: requests/s and p50/p99 latency of verdict lookups (`GET /v1/jobs/J/cycles/C/verdict`
  and NVRx `GET /logs?log_path=`) by 100 concurrent clients, against `GET /healthz` (the
  cheapest route of the same server, same clients) as the baseline;
- submissions: full cycle submissions (`POST /logs` terminal + `GET /logs` wait) by
  100 concurrent jobs — verdicts/s and p50/p99 latency, against the same analyses run
  in-process, serially, by `AttributionEngine.analyze_cycle` (the baseline);
- history: query times with N (default 1,000,000) stored cycles in SQLite, bulk-inserted
  through `storage.service_queries.bulk_insert_cycles`: search by fingerprint and by
  failure class, the policy's prior-cycle load, one cycle, and `GET /v1/search` over HTTP,
  against the same queries on a database with 1,000 cycles (the baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


from relaunch import storage  # noqa: E402
from relaunch.attribution.core.engine import AttributionEngine  # noqa: E402
from relaunch.storage.service_queries import bulk_insert_cycles, find_cycle_by_log_path  # noqa: E402
from tests._service_helpers import start_service  # noqa: E402

CLASSES = ["cuda_oom", "nccl_watchdog_timeout", "python_syntax_error", "xid_error", "ecc_error"]


def cycle_log(path: Path, job: int, lines: int = 2000) -> Path:
    rng = random.Random(job)
    out = []
    for i in range(lines):
        r = rng.randrange(16)
        out.append(
            f"[rank{r}]: iteration {i} | consumed samples {i * 128} | lm loss {rng.random():.4f}"
        )
    out += [
        "[rank5]: Traceback (most recent call last):",
        '[rank5]:   File "/w/train.py", line 40, in <module>',
        "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB",
        "[rank0]: [E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return path


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def summary(lat_s: list[float], wall_s: float) -> dict[str, float]:
    return {
        "requests": len(lat_s),
        "per_s": round(len(lat_s) / wall_s, 1),
        "p50_ms": round(pct(lat_s, 0.50) * 1000, 2),
        "p99_ms": round(pct(lat_s, 0.99) * 1000, 2),
    }


class RawConn:
    """A minimal keep-alive HTTP/1.1 client connection (asyncio streams).

    httpx costs more CPU per request than the server does on a small machine; this client
    keeps the measurement about the service.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> RawConn:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return cls(r, w)

    async def get(self, target: str) -> int:
        return (await self.request("GET", target))[0]

    async def request(self, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
        extra = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if body else ""
        self.writer.write(
            f"{method} {target} HTTP/1.1\r\nHost: bench\r\n{extra}\r\n".encode() + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def drive(
    port: int, concurrency: int, total: int, target: Callable[[int], str]
) -> dict[str, float]:
    """`total` GETs over `concurrency` keep-alive connections; latency of each."""
    conns = [await RawConn.open(port) for _ in range(concurrency)]
    for i, c in enumerate(conns):  # warm up every connection
        await c.get(target(i))
    lat: list[float] = []
    errors = 0
    counter = iter(range(total))

    async def worker(conn: RawConn) -> None:
        nonlocal errors
        for i in counter:
            t0 = time.perf_counter()
            try:
                ok = await conn.get(target(i)) == 200
            except (OSError, asyncio.IncompleteReadError):
                ok = False
            lat.append(time.perf_counter() - t0)
            errors += not ok

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    out = summary(lat, time.perf_counter() - t0)
    out["errors"] = errors
    for c in conns:
        c.close()
    return out


def bench_service(work: Path, jobs: int, lookups: int, cycles_per_job: int) -> dict[str, Any]:
    # no --audit-dir: the baseline engine writes no artifacts either
    svc = start_service(
        work,
        name="svc",
        audit=False,
        extra_args=["--rate-limit", "0", "--workers", "2", "--max-pending", "100000"],
    )
    try:
        logs = {
            (j, c): cycle_log(svc.root / f"job{j}" / f"cycle_{c}.log", j)
            for j in range(jobs)
            for c in range(cycles_per_job)
        }

        async def submissions() -> dict[str, Any]:
            from urllib.parse import quote

            port = int(svc.port or 0)

            async def one_job(j: int) -> list[float]:
                conn = await RawConn.open(port)
                lat = []
                for c in range(cycles_per_job):
                    t0 = time.perf_counter()
                    p = str(logs[(j, c)])
                    body = json.dumps(
                        {
                            "log_path": p,
                            "job_id": f"job{j}",
                            "cycle_id": c,
                            "analysis_intent": "terminal",
                        }
                    ).encode()
                    status, _ = await conn.request("POST", "/logs", body)
                    assert status == 200, status
                    status, got = await conn.request("GET", f"/logs?wait=true&log_path={quote(p)}")
                    assert status == 200 and json.loads(got)["status"] == "completed", got[:300]
                    lat.append(time.perf_counter() - t0)
                conn.close()
                return lat

            t0 = time.perf_counter()
            per_job = await asyncio.gather(*(one_job(j) for j in range(jobs)))
            wall = time.perf_counter() - t0
            return summary([x for xs in per_job for x in xs], wall)

        async def lookups_run() -> dict[str, Any]:
            from urllib.parse import quote

            port = int(svc.port or 0)
            paths = [
                quote(str(logs[(i % jobs, i % cycles_per_job)]))
                for i in range(jobs * cycles_per_job)
            ]
            health = await drive(port, 100, lookups, lambda i: "/healthz")
            v1 = await drive(
                port,
                100,
                lookups,
                lambda i: f"/v1/jobs/job{i % jobs}/cycles/{i % cycles_per_job}/verdict",
            )
            nvrx = await drive(
                port,
                100,
                lookups,
                lambda i: f"/logs?wait=false&log_path={paths[i % len(paths)]}",
            )
            return {"baseline_healthz": health, "v1_verdict": v1, "nvrx_get_logs": nvrx}

        sub = asyncio.run(submissions())
        look = asyncio.run(lookups_run())
    finally:
        svc.stop()

    # baseline: the same analyses in-process, serially, through the engine
    repo = storage.open_repository(f"sqlite:///{work / 'baseline.db'}")
    engine = AttributionEngine(repo)
    t0 = time.perf_counter()
    for (j, c), p in logs.items():
        engine.analyze_cycle(f"job{j}", c, p)
    base_wall = time.perf_counter() - t0
    engine.close()
    repo.close()
    n = len(logs)
    sub["baseline_inprocess_serial_per_s"] = round(n / base_wall, 1)
    sub["ratio_vs_baseline"] = round(sub["per_s"] / (n / base_wall), 3)
    for key in ("v1_verdict", "nvrx_get_logs"):
        look[key]["ratio_vs_healthz"] = round(
            look[key]["per_s"] / look["baseline_healthz"]["per_s"], 3
        )
    return {
        "submissions": {
            "concurrent_jobs": jobs,
            "cycles_per_job": cycles_per_job,
            "log_lines": 2004,
            **sub,
        },
        "lookups": {"concurrency": 100, **look},
    }


def fill_history(url: str, total: int, jobs: int) -> tuple[float, list[str]]:
    repo = storage.open_repository(url)
    per_job = total // jobs
    fps = [f"{CLASSES[i % len(CLASSES)]}:{i:04x}" for i in range(1000)]
    rng = random.Random(1)
    t0 = time.perf_counter()
    for j in range(jobs):

        def rows(j: int = j):
            for c in range(per_job):
                fp = fps[rng.randrange(len(fps))]
                cls = fp.split(":")[0]
                decision = "STOP" if cls == "python_syntax_error" else "RESTART"
                yield {
                    "cycle": c,
                    "log_path": f"/logs/job{j}/cycle_{c}.log",
                    "decision": decision,
                    "rule": "infra_retry" if decision == "RESTART" else "workload_certain",
                    "fingerprint": fp,
                    "failure_class": cls,
                    "domain": "workload" if decision == "STOP" else "infrastructure",
                    "last_iteration": c * 100,
                    "progress_known": True,
                    "verdict": {
                        "decision": decision,
                        "rule": "infra_retry",
                        "primary": {"fingerprint": fp, "failure_class": cls},
                        "progress": {"known": True, "last_iteration": c * 100},
                    },
                }

        bulk_insert_cycles(repo, f"hjob{j}", rows())
    elapsed = time.perf_counter() - t0
    repo.close()
    return elapsed, fps


def time_queries(
    url: str, fps: list[str], jobs: int, per_job: int, repeat: int
) -> dict[str, float]:
    repo = storage.open_repository(url)
    rng = random.Random(2)
    queries: dict[str, Callable[[], Any]] = {
        "search_fingerprint_100": lambda: repo.search(fingerprint=rng.choice(fps), limit=100),
        "search_failure_class_100": lambda: repo.search(
            failure_class=rng.choice(CLASSES), limit=100
        ),
        "prior_verdicts_last_cycle": lambda: repo.prior_verdicts(
            f"hjob{rng.randrange(jobs)}", per_job
        ),
        "get_cycle": lambda: repo.get_cycle(f"hjob{rng.randrange(jobs)}", rng.randrange(per_job)),
        "list_jobs": lambda: repo.list_jobs(limit=100),
        # NVRx GET /logs after a restart: which cycle registered this path (ix_cycles_log_path, 0002)
        "find_cycle_by_log_path": lambda: find_cycle_by_log_path(
            repo, f"/logs/job{rng.randrange(jobs)}/cycle_{rng.randrange(per_job)}.log"
        ),
    }
    out = {}
    for name, fn in queries.items():
        fn()  # warm the page cache
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name + "_ms"] = round(statistics.median(times) * 1000, 3)
    repo.close()
    return out


def bench_history(work: Path, total: int, repeat: int) -> dict[str, Any]:
    jobs = max(1, total // 1000)
    big_url = f"sqlite:///{work / 'history_big.db'}"
    small_url = f"sqlite:///{work / 'history_small.db'}"
    insert_s, fps = fill_history(big_url, total, jobs)
    _, _ = fill_history(small_url, 1000, 1)
    big = time_queries(big_url, fps, jobs, total // jobs, repeat)
    small = time_queries(small_url, fps, 1, 1000, repeat)
    # the same search through the service over HTTP, on the big database
    svc = start_service(work, name="histsvc", db_url=big_url, extra_args=["--rate-limit", "0"])
    try:
        with svc.client() as c:
            times = []
            for i in range(repeat):
                t0 = time.perf_counter()
                r = c.get("/v1/search", params={"fingerprint": fps[i % len(fps)], "limit": 100})
                times.append(time.perf_counter() - t0)
                assert r.status_code == 200 and r.json()["results"], r.text
    finally:
        svc.stop()
    big["http_v1_search_fingerprint_100_ms"] = round(statistics.median(times) * 1000, 3)
    ratios = {k: round(big[k] / small[k], 2) for k in small if small[k] > 0}
    return {
        "stored_cycles": total,
        "jobs": jobs,
        "bulk_insert_s": round(insert_s, 2),
        "bulk_insert_rows_per_s": round(total / insert_s),
        "db_mb": round((work / "history_big.db").stat().st_size / 1e6, 1),
        "queries_big": big,
        "baseline_1000_cycles": small,
        "ratio_big_vs_baseline": ratios,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100, help="concurrent jobs submitting cycles")
    ap.add_argument("--cycles-per-job", type=int, default=3)
    ap.add_argument("--lookups", type=int, default=5000, help="requests per lookup test")
    ap.add_argument("--cycles", type=int, default=1_000_000, help="stored cycles for history")
    ap.add_argument("--repeat", type=int, default=50, help="repetitions per history query")
    ap.add_argument("--skip", choices=["service", "history"], action="append", default=[])
    args = ap.parse_args()
    out: dict[str, Any] = {"benchmark": "service_bench"}
    with tempfile.TemporaryDirectory(prefix="relaunch-svc-bench-") as tmp:
        work = Path(tmp)
        if "service" not in args.skip:
            out.update(bench_service(work, args.jobs, args.lookups, args.cycles_per_job))
        if "history" not in args.skip:
            out["history"] = bench_history(work, args.cycles, args.repeat)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
