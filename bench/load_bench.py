"""Load with a crash: N concurrent clients against a real `relaunch serve`, a SIGKILL of
the service mid-run, a restart on the same database, and an account of every verdict.

Run from the repository root::

    python bench/load_bench.py [--clients 8] [--cycles 12] [--lines 400] [--max-seconds 300]

SQLite always; PostgreSQL too when `RELAUNCH_TEST_PG_URL` is set. Each client thread runs
its own job through `--cycles` cycles, alternating the two ways a cycle reaches the
service: a log under the allowed root (`POST /logs` terminal, then `GET /logs` wait) and
an upload (`POST /v1/jobs/J/cycles/C/log`), with a verdict lookup and a health probe in
between. Once a third of the cycles have a verdict the service is killed (SIGKILL) and
restarted on the same database (at a moment with terminal submissions acknowledged and not
yet answered with a verdict, when there is one within 5 s); clients wait for it and go on.

Printed per database (one JSON object, then a table): errors (answers other than the
expected ones, outside the outage), outage failures (requests cut by the kill, retried),
p50/p99 latency per route, and the losses, which must all be 0:

- lost verdicts: cycles whose verdict a client had received before the kill, missing or
  different after it;
- analyses never resumed: cycles whose terminal submission the service had acknowledged
  but whose verdict nobody had received at the kill, and which the restarted service does
  not complete by itself (checked before any client asks again).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests._service_helpers import RunningService, start_service  # noqa: E402

FAILURES = [
    "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB",
    "[rank{r}]: RuntimeError: CUDA error: an illegal memory access was encountered",
    "[rank{r}]: ValueError: bad learning rate -1",
    "[rank0]: [E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
    '[rank{r}]:   File "/w/train.py", line 3\n[rank{r}]: SyntaxError: invalid syntax',
]


def cycle_log(rng: random.Random, lines: int) -> bytes:
    out = [
        f"[rank{rng.randrange(8)}]: iteration {i} | consumed samples {i * 64} | lm loss 1.{i % 97}"
        for i in range(lines)
    ]
    out.append(rng.choice(FAILURES).format(r=rng.randrange(8)))
    return ("\n".join(out) + "\n").encode()


class Outage:
    """Clients wait here while the service is down; `client()` builds one for the service
    that is up now (the restart moves it to another port)."""

    def __init__(self, svc: RunningService) -> None:
        self.svc = svc
        self.up = threading.Event()
        self.up.set()
        self.killed = False
        self.generation = 0  # +1 per kill: a client of an older one talks to a dead port

    def client(self) -> httpx.Client:
        self.up.wait()
        c = self.svc.client(timeout=120.0)
        c.bench_generation = self.generation  # type: ignore[attr-defined]
        return c


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = {}
        self.errors: list[str] = []
        self.outage_failures = 0
        self.acked: dict[tuple[str, int], dict[str, Any]] = {}  # verdicts clients received
        self.submitted: set[tuple[str, int]] = set()  # terminal acknowledged, no verdict yet

    def time(self, route: str, seconds: float) -> None:
        with self.lock:
            self.latency.setdefault(route, []).append(seconds)


def _call(
    stats: Stats, outage: Outage, c: httpx.Client, route: str, method: str, url: str, **kw: Any
) -> httpx.Response | None:
    t0 = time.perf_counter()
    try:
        r = c.request(method, url, **kw)
    except httpx.TransportError as exc:
        with stats.lock:
            if outage.killed or getattr(c, "bench_generation", 0) != outage.generation:
                stats.outage_failures += 1
            else:
                stats.errors.append(f"{route}: {type(exc).__name__}: {exc}")
        return None
    stats.time(route, time.perf_counter() - t0)
    return r


def _verdict_of(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body.get(k) for k in ("decision", "rule", "basis")}


def run_client(
    n: int, args: argparse.Namespace, run: str, outage: Outage, stats: Stats, deadline: float
) -> None:
    rng = random.Random(n)
    job = f"load-{run}-{n}"
    svc = outage.svc
    (svc.root / job).mkdir(parents=True, exist_ok=True)
    cycle = 0
    c = outage.client()
    while cycle < args.cycles and time.monotonic() < deadline:
        data = cycle_log(rng, args.lines)
        key = (job, cycle)
        verdict: dict[str, Any] | None = None
        if cycle % 2 == 0:
            log = svc.root / job / f"cycle_{cycle}.log"
            log.write_bytes(data)
            body = {"log_path": str(log), "job_id": job, "cycle_id": cycle}
            r = _call(
                stats,
                outage,
                c,
                "POST /logs",
                "POST",
                "/logs",
                json={**body, "analysis_intent": "terminal"},
            )
            if r is not None and r.status_code == 200:
                with stats.lock:
                    stats.submitted.add(key)
                r = _call(
                    stats,
                    outage,
                    c,
                    "GET /logs wait",
                    "GET",
                    "/logs",
                    params={"log_path": str(log)},
                )
                if r is not None and r.status_code == 200 and r.json()["status"] == "completed":
                    verdict = _verdict_of(r.json()["result"])
        else:
            url = f"/v1/jobs/{job}/cycles/{cycle}/log"
            r = _call(stats, outage, c, "POST upload", "POST", url, content=data)
            if r is not None and r.status_code == 200 and r.json()["status"] == "completed":
                verdict = _verdict_of(r.json()["verdict"])
        if r is not None and r.status_code >= 300:
            with stats.lock:
                stats.errors.append(
                    f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:200]}"
                )
        if verdict is None:  # cut by the kill (or an error): try the cycle again
            c.close()
            c = outage.client()
            continue
        with stats.lock:
            stats.acked[key] = verdict
            stats.submitted.discard(key)
        look = _call(
            stats, outage, c, "GET verdict", "GET", f"/v1/jobs/{job}/cycles/{cycle}/verdict"
        )
        if look is not None and look.status_code != 200:
            with stats.lock:
                stats.errors.append(f"GET verdict: {look.status_code} {look.text[:200]}")
        _call(stats, outage, c, "GET /healthz", "GET", "/healthz")
        cycle += 1
    c.close()


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def bench(db_url: str | None, label: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    svc = start_service(
        tmp / label,
        db_url=db_url,
        extra_args=["--rate-limit", "0", "--workers", str(args.workers)],
        audit=False,
        name=f"svc-{label}",
    )
    outage = Outage(svc)
    stats = Stats()
    total = args.clients * args.cycles
    deadline = time.monotonic() + args.max_seconds
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=run_client, args=(n, args, run, outage, stats, deadline))
        for n in range(args.clients)
    ]
    for t in threads:
        t.start()
    lost: list[str] = []
    unresumed: list[str] = []
    try:
        while len(stats.acked) < total // 3 and any(t.is_alive() for t in threads):
            time.sleep(0.01)
        aim = time.monotonic() + 5.0  # prefer a moment with analyses acknowledged, unfinished
        while not stats.submitted and time.monotonic() < aim:
            time.sleep(0.001)
        outage.up.clear()
        outage.killed = True
        outage.generation += 1
        assert svc.proc is not None
        svc.proc.kill()  # SIGKILL: no shutdown, no flush
        svc.proc.wait(30)
        svc.proc = None
        with stats.lock:
            acked_at_kill = dict(stats.acked)
            in_flight = set(stats.submitted)
        svc.start()
        with svc.client(timeout=120.0) as c:
            for job, cycle in sorted(in_flight):  # before any client asks again
                r = c.get(f"/v1/jobs/{job}/cycles/{cycle}/verdict", params={"wait": "true"})
                if r.status_code != 200 or r.json()["status"] != "completed":
                    unresumed.append(f"{job}/{cycle}: {r.status_code} {r.text[:120]}")
        outage.killed = False
        outage.up.set()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        with svc.client(timeout=120.0) as c:
            for (job, cycle), want in sorted(acked_at_kill.items()):
                got = c.get(f"/v1/jobs/{job}/cycles/{cycle}").json().get("verdict") or {}
                if _verdict_of(got) != want:
                    lost.append(f"{job}/{cycle}")
            after = sum(
                1
                for (job, cycle) in stats.acked
                if c.get(f"/v1/jobs/{job}/cycles/{cycle}/verdict").json().get("status")
                == "completed"
            )
    finally:
        outage.up.set()
        svc.stop()
    routes = {
        route: {
            "n": len(v),
            "p50_ms": round(statistics.median(v) * 1000, 1),
            "p99_ms": round(pct(v, 0.99) * 1000, 1),
        }
        for route, v in sorted(stats.latency.items())
    }
    return {
        "db": label,
        "clients": args.clients,
        "cycles_planned": total,
        "verdicts_received": len(stats.acked),
        "verdicts_stored_at_end": after,
        "verdicts_before_kill": len(acked_at_kill),
        "in_flight_at_kill": len(in_flight),
        "errors": len(stats.errors),
        "error_samples": stats.errors[:5],
        "outage_failures": stats.outage_failures,
        "lost_verdicts": len(lost),
        "lost_samples": lost[:5],
        "analyses_never_resumed": len(unresumed),
        "unresumed_samples": unresumed[:5],
        "elapsed_s": round(elapsed, 2),
        "routes": routes,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--cycles", type=int, default=12, help="cycles per client (its own job)")
    p.add_argument("--lines", type=int, default=400, help="lines per cycle log")
    p.add_argument("--workers", type=int, default=2, help="the service's analysis threads")
    p.add_argument("--max-seconds", type=float, default=300.0, help="stop clients after this")
    args = p.parse_args(argv)
    targets: list[tuple[str | None, str]] = [(None, "sqlite")]
    if os.environ.get("RELAUNCH_TEST_PG_URL"):
        targets.append((os.environ["RELAUNCH_TEST_PG_URL"], "postgresql"))
    results = []
    with tempfile.TemporaryDirectory(prefix="relaunch-load-") as tmp:
        for url, label in targets:
            results.append(bench(url, label, args, Path(tmp)))
    print(json.dumps(results, indent=2))
    for r in results:
        print(
            f"\n{r['db']}: {r['clients']} clients, {r['verdicts_received']}/{r['cycles_planned']}"
            f" verdicts in {r['elapsed_s']} s; errors {r['errors']}, outage failures"
            f" {r['outage_failures']}; SIGKILL after {r['verdicts_before_kill']} verdicts with"
            f" {r['in_flight_at_kill']} in flight; lost verdicts {r['lost_verdicts']},"
            f" analyses never resumed {r['analyses_never_resumed']}"
        )
        for route, v in r["routes"].items():
            print(f"  {route:<16} n={v['n']:<5} p50 {v['p50_ms']:>8} ms  p99 {v['p99_ms']:>8} ms")
    bad = any(r["lost_verdicts"] or r["analyses_never_resumed"] or r["errors"] for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
