"""The newest complete checkpoint in the history, the service's JSON and the dashboard.

Two cycle logs carry the launcher's `checkpoint` facts (as `relaunch run` writes them when
`relaunch.checkpoint` reports a complete checkpoint); the real `relaunch analyze --db`
stores each cycle's verdict in a real SQLite file, and the real service (uvicorn on
127.0.0.1) must expose the per-cycle checkpoint (revision 0010) in `/v1/jobs/...` and show
the newest one, with the time lost since it, on the job page and the jobs list.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from relaunch.web.views import fmt_duration
from tests._service_helpers import running_service
from tests._web_helpers import analyze

pytestmark = pytest.mark.slow

JOB = "ckpt-dash-job"
AT_10 = round(time.time() - 7200.0, 3)  # step 10 completed two hours ago
AT_20 = round(time.time() - 3600.0, 3)  # step 20 one hour ago


def _fact(step: Any, tier: str, at: Any, size: Any = 5 << 20) -> str:
    body = {
        "fact": "checkpoint",
        "cycle": 0,
        "rank": 0,
        "step": step,
        "path": f"/ckpt/step_{step}",
        "tier": tier,
        "size": size,
        "duration_s": 0.5,
        "at": at,
    }
    return "[relaunch] fact: " + json.dumps(body, separators=(",", ":"))


def _net_failure(first: int, last: int) -> list[str]:
    lines = [
        f"[rank{r}]: [relaunch] progress rank={r} iteration={it} loss=2.0"
        for it in range(first, last + 1, 5)
        for r in range(2)
    ]
    return [
        *lines,
        "[rank1]: node003:1234:5678 [1] NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.3<40527> with error 12, opcode 0, len 0, vendor err 129",
    ]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("webckpt")
    logs = tmp / "logs"
    logs.mkdir()
    # cycle 0: step 10 local then persistent, step 20 local, then the NCCL error
    c0 = _net_failure(0, 25)
    c0[4:4] = [_fact(10, "local", AT_10), _fact(10, "persistent", AT_10 + 1)]
    c0[-1:-1] = [_fact(20, "local", AT_20, size=6 << 20)]
    # cycle 1: no complete checkpoint; two malformed facts (a step that is no number, a
    # negative step) are ignored, never stored and never a crash
    c1 = _net_failure(20, 30)
    c1[2:2] = [_fact("x", "local", AT_20 + 10), _fact(-5, "local", AT_20 + 10)]
    paths = []
    for n, lines in enumerate((c0, c1)):
        p = logs / f"cycle{n}.log"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(p)
    db_url = f"sqlite:///{tmp / 'relaunch.db'}"
    verdicts = [analyze(db_url, p, n, job=JOB) for n, p in enumerate(paths)]
    plain = logs / "plain.log"
    plain.write_text("\n".join(_net_failure(0, 10)) + "\n", encoding="utf-8")
    analyze(db_url, plain, 0, job="no-ckpt-job")
    with running_service(tmp, db_url=db_url, root=logs) as svc:
        yield {"svc": svc, "verdicts": verdicts}


def _get(svc: Any, path: str) -> Any:
    with svc.client() as c:
        r = c.get(path)
    assert r.status_code == 200, (path, r.status_code, r.text[:300])
    return r


def test_the_verdict_carries_the_newest_checkpoint_fact(served: dict[str, Any]) -> None:
    v0, v1 = served["verdicts"]
    ck = v0["progress"]["checkpoint"]
    assert (ck["step"], ck["tier"], ck["size"], ck["at"]) == (20, "local", 6 << 20, AT_20)
    assert v1["progress"]["checkpoint"] is None  # the malformed facts were ignored


def test_history_stores_the_checkpoint_per_cycle_in_the_api(served: dict[str, Any]) -> None:
    svc = served["svc"]
    cycles = _get(svc, f"/v1/jobs/{JOB}/cycles").json()["cycles"]
    assert [c["checkpoint_step"] for c in cycles] == [20, None]
    c0 = cycles[0]
    assert (c0["checkpoint_tier"], c0["checkpoint_size"]) == ("local", 6 << 20)
    assert datetime.fromisoformat(c0["checkpoint_at"]).timestamp() == pytest.approx(AT_20)
    assert cycles[1]["checkpoint_tier"] is None and cycles[1]["checkpoint_at"] is None
    job = _get(svc, f"/v1/jobs/{JOB}").json()
    assert {k: job["checkpoint"][k] for k in ("cycle", "step", "tier", "size")} == {
        "cycle": 0,
        "step": 20,
        "tier": "local",
        "size": 6 << 20,
    }
    one = _get(svc, f"/v1/jobs/{JOB}/cycles/0").json()
    assert one["checkpoint_step"] == 20


def test_job_page_shows_newest_checkpoint_and_time_lost(served: dict[str, Any]) -> None:
    svc = served["svc"]
    cycles = _get(svc, f"/v1/jobs/{JOB}/cycles").json()["cycles"]
    last_end = max(datetime.fromisoformat(c["ended_at"]) for c in cycles)
    lost = fmt_duration(
        (last_end - datetime.fromisoformat(cycles[0]["checkpoint_at"])).total_seconds()
    )
    html = _get(svc, f"/jobs/{JOB}").text
    m = re.search(r'<p class="job-checkpoint" id="job-checkpoint">(.*?)</p>', html, re.S)
    assert m is not None, html[:2000]
    line = m.group(1)
    assert '<span id="checkpoint-step">step 20</span>' in line
    assert "local tier" in line and "6.0 MiB" in line and "cycle 0" in line
    assert f'<span id="checkpoint-lost">time lost since it: {lost}</span>' in line
    assert "to the last cycle&#39;s end" in line or "to the last cycle's end" in line
    jobs = _get(svc, "/").text
    row = jobs[jobs.index(f'data-job="{JOB}"') :].split("</tr>")[0]
    cell = re.search(r'<td class="ckpt">(.*?)</td>', row, re.S)
    assert cell is not None and "step 20" in cell.group(1) and "lost since" in cell.group(1)


def test_a_job_without_checkpoints_says_so(served: dict[str, Any]) -> None:
    svc = served["svc"]
    html = _get(svc, "/jobs/no-ckpt-job").text
    assert "No complete checkpoint reported" in html
    assert _get(svc, "/v1/jobs/no-ckpt-job").json()["checkpoint"] is None
