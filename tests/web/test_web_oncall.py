"""The on-call dashboard over HTTP (router on uvicorn, real SQLite): the jobs list's deciding
verdict, order, filters and counts; HEAD on every page; the cycle page's next step and log
excerpt; the raw log, its plain text and its bounded tail, confined to the allowed root;
and MCP `list_jobs` reporting the deciding verdict too."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from relaunch import storage
from tests._web_helpers import T0, DashboardServer, _ev, http_get, make_verdict, seed_history


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def job_rows(html: str) -> list[str]:
    return re.findall(r'<tr class="job[^"]*" data-job="([^"]+)"', html)


TRACEBACK_LOG = [
    "[rank0]: step 10 loss 2.1",
    "[rank1]: step 10 loss 2.1",
    "[rank1]: Traceback (most recent call last):",
    "[rank0]: step 11 loss 2.0",
    '[rank1]:   File "/work/train.py", line 88, in forward',
    "[rank1]:     out = self.layer(x)",
    "[rank0]: waiting for rank 1",
    "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "[rank0]: Watchdog caught collective operation timeout",
]


@pytest.fixture()
def site(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A fresh history (seed_history plus a job whose log is on disk) and its server."""
    repo = storage.open_repository(f"sqlite:///{tmp_path / 'relaunch.db'}")
    seed_history(repo)
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "cycle_0.log"
    log.write_text("\n".join(TRACEBACK_LOG) + "\n")
    oom = _ev(8, "cuda_oom", TRACEBACK_LOG[7][9:], rank=1, fp="cuda_oom:N GiB", node="gpu-7")
    repo.register_cycle("oom-job", 0, str(log), node="gpu-7", started_at=T0)
    repo.save_verdict("oom-job", 0, make_verdict("RESTART", "oom_retry", oom, iteration=11))
    repo.register_cycle("oom-job", 1, str(logs / "cycle_1.log"))  # running, log growing
    (logs / "cycle_1.log").write_text("[rank0]: step 1\n[rank0]: step 2\npartial")
    outside = tmp_path / "secret.log"
    outside.write_text("secret\n")
    repo.register_cycle("oom-job", 2, str(outside))
    repo.register_cycle("oom-job", 3, str(logs / "never-written.log"))
    (logs / "link.log").symlink_to(outside)  # inside the root by name, outside in fact
    repo.register_cycle("oom-job", 4, str(logs / "link.log"))
    os.mkfifo(logs / "fifo.log")  # would block a plain open()
    repo.register_cycle("oom-job", 5, str(logs / "fifo.log"))
    with DashboardServer(repo, log_root=logs) as server:
        yield {"url": server.base_url, "repo": repo, "logs": logs, "tmp": tmp_path}
    repo.close()


def test_jobs_list_shows_the_deciding_verdict_failing_jobs_first(site: dict[str, Any]) -> None:
    html = http_get(site["url"] + "/").text
    order = job_rows(html)
    # stopped jobs first, then the running job being restarted, the idle running job last
    assert set(order[:2]) == {"train-llama", "stopped-early"}
    assert order[2:] == ["oom-job", "job-running"]
    row = html[html.index('data-job="stopped-early"') :].split("</tr>")[0]
    # stopped on cycle 0 although cycle 1 is the last one (registered, never analysed)
    cells = text_of(row)
    assert "STOP cycle 0" in cells and "cuda_oom" in cells and "oom_stop" in cells
    assert "rank 3 · node-c" in cells
    assert '<tr class="job failing" data-job="stopped-early">' in html
    running = text_of(html[html.index('data-job="oom-job"') :].split("</tr>")[0])
    assert "RESTART cycle 0" in running and "rank 1 · gpu-7" in running
    counts = {m[1]: int(m[0]) for m in re.findall(r'<span class="n">(\d+)</span> (\w+)</a>', html)}
    assert counts == {"running": 2, "stopped": 2, "failed": 0, "succeeded": 0, "interrupted": 0}


@pytest.mark.parametrize(
    ("query", "jobs"),
    [
        ({"state": "running"}, ["oom-job", "job-running"]),
        ({"state": "failed"}, []),
        ({"job": "LLAMA"}, ["train-llama"]),
        ({"job": "%"}, []),  # a LIKE wildcard is a plain character here
        ({"failure_class": "cuda_oom"}, ["stopped-early", "oom-job"]),
        ({"failure_class": "cuda_oom", "state": "stopped"}, ["stopped-early"]),
        ({"until": "2000-01-01"}, []),
        ({"window": "30d", "job": "train"}, ["train-llama"]),
    ],
)
def test_jobs_list_filters(site: dict[str, Any], query: dict[str, str], jobs: list[str]) -> None:
    r = http_get(site["url"] + "/", params=query)
    assert r.status_code == 200
    assert sorted(job_rows(r.text)) == sorted(jobs)
    if not jobs:
        assert 'id="no-match"' in r.text
    for value in query.values():  # the form shows the filter it applied
        assert (
            f'value="{value}"' in r.text
            or f"<option selected>{value}</option>" in r.text
            or (f'<option value="{value}" selected>' in r.text)
        )


def test_time_window_filters_the_counts_too(site: dict[str, Any]) -> None:
    before = (T0 - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M")
    html = http_get(site["url"] + "/", params={"since": before}).text
    assert len(job_rows(html)) == 4 and "active from" in html
    html = http_get(site["url"] + "/", params={"until": "2000-01-01T00:00Z"}).text
    assert re.findall(r"<span class=\"n\">(\d+)</span>", html) == ["0"] * 5  # + interrupted


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"state": "exploded"}, "state must be one of running, succeeded"),
        ({"window": "2y"}, "window must be one of 1h, 6h, 24h, 7d, 30d or all"),
        ({"since": "yesterday"}, "since must be a date or date-time like 2026-12-03 07:00"),
        ({"since": "2026-01-02", "until": "2026-01-01"}, "since must not be later than until"),
        ({"job": "x" * 300}, "filter term too long"),
    ],
)
def test_bad_filters_get_a_clear_400(
    site: dict[str, Any], query: dict[str, str], message: str
) -> None:
    r = http_get(site["url"] + "/", params=query)
    assert r.status_code == 400 and message in r.text and "Traceback" not in r.text


PAGES = [
    "/",
    "/?state=stopped",
    "/jobs/train-llama",
    "/jobs/train-llama/cycles/0",
    "/jobs/train-llama/cycles/0/audit.json",
    "/jobs/oom-job/cycles/0/log",
    "/jobs/oom-job/cycles/0/log.txt",
    "/jobs/oom-job/cycles/1/log/tail?offset=0",
    "/search",
    "/static/style.css",
    "/static/logtail.js",
]


@pytest.mark.parametrize("path", PAGES)
def test_head_answers_like_get_without_a_body(site: dict[str, Any], path: str) -> None:
    import httpx

    get = http_get(site["url"] + path)
    head = httpx.head(site["url"] + path, timeout=10)
    assert get.status_code == 200, get.text[:300]
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]


def test_cycle_page_next_step_is_the_mcp_one_and_shows_the_traceback(
    site: dict[str, Any],
) -> None:
    from relaunch.attribution.mcp.server import _Tools

    html = http_get(site["url"] + "/jobs/oom-job/cycles/0").text
    mcp = _Tools(site["repo"], [], None).explain_cycle("oom-job", 0)
    step = re.search(r'id="next-step">(.*?)</p>', html, re.S)
    assert step and text_of(step.group(1)).strip() == f"Next step: {mcp.next_step}"
    assert mcp.next_step.startswith("Restarting is expected to help (cuda_oom (log line 8))")
    tb = html[html.index('id="traceback"') :].split("</pre>")[0]
    numbers = re.findall(r'href="/jobs/oom-job/cycles/0/log\?around=(\d+)#L\d+"', tb)
    assert numbers == ["3", "5", "6", "8"]  # rank 1's frames only, up to the primary line
    assert "<mark>[rank1]: torch.OutOfMemoryError" in tb and "rank0" not in tb
    others = html[html.index('id="other-ranks"') :].split("</details>")[0]
    assert "4 line(s) of rank(s) 0" in others and "waiting for rank 1" in others
    link = re.search(r'id="raw-log-link" href="([^"]+)"', html)
    assert link and link.group(1) == "/jobs/oom-job/cycles/0/log?around=8#L8"
    stop = http_get(site["url"] + "/jobs/train-llama/cycles/3").text
    assert "Do not restart: fix python_syntax_error (log line 3)" in stop
    assert "Log not shown: path is outside the allowed roots" in stop


def test_raw_log_page_has_line_anchors_and_pages(site: dict[str, Any]) -> None:
    r = http_get(site["url"] + "/jobs/oom-job/cycles/0/log", params={"around": "8"})
    assert r.status_code == 200
    lines = re.findall(r'<span class="line" id="L(\d+)">', r.text)
    assert lines == [str(n) for n in range(1, 10)]
    assert '<a class="ln" href="#L8" tabindex="-1">8</a>[rank1]: torch.OutOfMemoryError' in r.text
    page = http_get(
        site["url"] + "/jobs/oom-job/cycles/0/log", params={"start": "4", "lines": "3"}
    ).text
    assert re.findall(r'id="L(\d+)"', page) == ["4", "5", "6"]
    assert 'id="prev-page"' in page and 'href="/jobs/oom-job/cycles/0/log?start=7"' in page
    txt = http_get(site["url"] + "/jobs/oom-job/cycles/0/log.txt")
    assert txt.text.splitlines() == TRACEBACK_LOG
    assert txt.headers["content-type"].startswith("text/plain")


def test_follow_a_running_cycle_log_with_a_bounded_tail(site: dict[str, Any]) -> None:
    url = site["url"] + "/jobs/oom-job/cycles/1/log"
    page = http_get(url, params={"follow": "1"}).text
    offset = int(re.search(r'data-offset="(\d+)"', page).group(1))  # type: ignore[union-attr]
    assert offset == len("[rank0]: step 1\n[rank0]: step 2\n")  # complete lines only
    assert 'data-next-line="3"' in page and 'data-tail-url="/jobs/oom-job/cycles/1/log/tail"'
    with open(site["logs"] / "cycle_1.log", "a") as fh:
        fh.write(" line 3\n[rank0]: step 4\n")
    tail = http_get(url + "/tail", params={"offset": offset}).json()
    assert tail["lines"] == ["partial line 3", "[rank0]: step 4"]
    assert tail["live"] is True and tail["reset"] is False
    again = http_get(url + "/tail", params={"offset": tail["next_offset"]}).json()
    assert again["lines"] == [] and again["next_offset"] == tail["next_offset"]
    gone = http_get(url + "/tail", params={"offset": 10**9}).json()
    assert gone["reset"] is True  # the log is shorter than the offset: start again
    bad = http_get(url + "/tail", params={"offset": "-5"})
    assert bad.status_code == 400 and "offset must be a non-negative integer" in bad.json()["error"]
    done = http_get(site["url"] + "/jobs/oom-job/cycles/0/log/tail", params={"offset": 0}).json()
    assert done["live"] is False and len(done["lines"]) == len(TRACEBACK_LOG)


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/jobs/oom-job/cycles/2/log", 403, "outside the allowed roots"),
        ("/jobs/oom-job/cycles/2/log.txt", 403, "outside the allowed roots"),
        ("/jobs/train-llama/cycles/0/log", 403, "outside the allowed roots"),
        ("/jobs/oom-job/cycles/3/log", 404, "log file not found"),
        ("/jobs/oom-job/cycles/3/log/tail", 404, "log file not found"),
        ("/jobs/oom-job/cycles/4/log", 403, "a component of the path is a symlink"),
        ("/jobs/oom-job/cycles/4/log.txt", 403, "a component of the path is a symlink"),
        ("/jobs/oom-job/cycles/5/log", 400, "not a regular file"),
        ("/jobs/oom-job/cycles/5/log/tail", 400, "not a regular file"),
        ("/jobs/oom-job/cycles/9/log", 404, "no cycle 9 of job"),
        ("/jobs/oom-job/cycles/0/log?start=x", 400, "start must be a non-negative integer"),
    ],
)
def test_logs_are_confined_to_the_allowed_root(
    site: dict[str, Any], path: str, status: int, message: str
) -> None:
    r = http_get(site["url"] + path)
    assert r.status_code == status and message in r.text
    assert "secret" not in r.text.replace("secret.log", "")


def test_a_router_without_log_access_serves_no_log(tmp_path: Path) -> None:
    repo = storage.open_repository(f"sqlite:///{tmp_path / 'relaunch.db'}")
    log = tmp_path / "c.log"
    log.write_text("hello\n")
    repo.register_cycle("j", 0, str(log))
    with DashboardServer(repo) as server:
        r = http_get(server.base_url + "/jobs/j/cycles/0/log")
        cycle = http_get(server.base_url + "/jobs/j/cycles/0").text
    repo.close()
    assert r.status_code == 404 and "this server does not serve log files" in r.text
    assert "hello" not in r.text and "hello" not in cycle


def test_job_page_node_health_notes(site: dict[str, Any]) -> None:
    site["repo"].save_node_health(
        "oom-job",
        0,
        {
            "node": "gpu-7",
            "healthy": False,
            "reason": "nvml: ECC errors <b>",
            "excluded_from_cycle": 1,
            "checks": [{"name": "nvml", "status": "fail", "detail": "ecc"}],
        },
    )
    html = http_get(site["url"] + "/jobs/oom-job").text
    notes = html[html.index('id="node-health-notes"') :].split("</ul>")[0]
    assert "nvml: ECC errors &lt;b&gt;" in notes  # escaped
    assert "cycle 0 : gpu-7 unhealthy — nvml: ECC errors &lt;b&gt; [nvml fail]" in text_of(notes)
    assert "left out of cycle 1" in text_of(notes)


def test_mcp_list_jobs_reports_the_deciding_verdict(site: dict[str, Any]) -> None:
    from relaunch.attribution.mcp.server import _Tools

    jobs = {j.job_id: j for j in _Tools(site["repo"], [], None).list_jobs(50, None).jobs}
    early = jobs["stopped-early"]
    assert early.last_cycle == 1  # the last cycle was never analysed ...
    assert early.last_decision == "STOP" and early.decision_cycle == 0  # ... cycle 0 decided
    assert early.last_failure_class == "cuda_oom" and early.last_rule == "oom_stop"
    assert jobs["job-running"].last_decision is None  # no verdict at all yet


def test_repository_deciding_verdicts_and_counts(site: dict[str, Any]) -> None:
    repo = site["repo"]
    d = repo.deciding_verdicts(["stopped-early", "no-such-job"])
    assert list(d) == ["stopped-early"] and d["stopped-early"]["deciding"]["cycle"] == 0
    assert repo.deciding_verdicts([]) == {}
    counts = repo.job_state_counts()
    assert counts["total"] == 4 and counts["stopped"] == 2 and counts["running"] == 2
    with pytest.raises(ValueError, match="job state must be one of"):
        repo.job_overviews(state="nope")
    with pytest.raises(ValueError, match="limit must be an integer"):
        repo.job_overviews(limit=0)


def test_a_cycle_registered_after_the_stop_is_not_shown_running(site: dict[str, Any]) -> None:
    html = http_get(site["url"] + "/jobs/stopped-early").text
    row = html[html.index('data-cycle="1">') :].split("</tr>")[0]
    assert "never analysed (the job had ended)" in row
    timeline = html[html.index('id="cycle-timeline"') :].split("</svg>")[0]
    assert "bar running" not in timeline  # it does not grow until now
    running = http_get(site["url"] + "/jobs/oom-job").text
    assert 'class="bar running" data-cycle="1"' in running  # a live job's cycle does


def test_live_refresh_of_the_jobs_list_skips_the_failure_class_facets(
    site: dict[str, Any],
) -> None:
    full = http_get(site["url"] + "/").text
    datalist = full[full.index('<datalist id="failure-classes">') :].split("</datalist>")[0]
    assert '<option value="cuda_oom">' in datalist and full.index("</main>") < full.index(
        "<datalist"
    )  # outside <main>: a live refresh leaves it in place
    fragment = http_get(site["url"] + "/", params={"fragment": "1"}).text
    assert "<datalist" not in fragment and 'list="failure-classes"' in fragment
