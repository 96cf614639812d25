"""The dashboard router served by uvicorn on 127.0.0.1 over a real SQLite history."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relaunch import storage
from tests._web_helpers import SEED_GOODPUT, XSS, DashboardServer, http_get, seed_history


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("web")
    repo = storage.open_repository(f"sqlite:///{tmp / 'relaunch.db'}")
    info = seed_history(repo)
    audit = tmp / "audit-3.json"
    audit.write_text('{"kind": "relaunch-audit", "cycle": 3}')
    repo.set_audit_path(info["job_id"], 3, str(audit))
    with DashboardServer(repo) as server:
        yield {"url": server.base_url, "repo": repo, "tmp": tmp, **info}
    repo.close()


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_jobs_page_lists_state_and_last_verdict(site: dict[str, Any]) -> None:
    r = http_get(site["url"] + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert 'href="/jobs/train-llama"' in html and 'href="/jobs/job-running"' in html
    row = html[html.index('data-job="train-llama"') :].split("</tr>")[0]
    assert "stopped" in row and "decision-stop" in row and "cycle 3" in row and "rank 0" in row
    assert "python_syntax_error" in row and "workload_certain_stop" in row
    running = html[html.index('data-job="job-running"') :].split("</tr>")[0]
    assert "running" in running
    assert 'data-live-ms="3000"' in html  # the jobs list refreshes itself
    assert "script-src 'self'" in r.headers["content-security-policy"]


def test_job_page_timeline_and_charts(site: dict[str, Any]) -> None:
    html = http_get(site["url"] + "/jobs/train-llama").text
    rows = re.findall(r'<tr class="cycle [^"]*" data-cycle="(\d+)">(.*?)</tr>', html, re.S)
    assert [n for n, _ in rows] == ["0", "1", "2", "3"]
    cells = {n: text_of(body) for n, body in rows}
    assert "nccl_network_error" in cells["0"] and "RESTART" in cells["0"] and "100" in cells["0"]
    assert "250" in cells["1"] and "progress_protects" in cells["1"]
    assert "LLM" in cells["2"]
    assert "STOP" in cells["3"] and "unknown" in cells["3"]  # no progress reported
    assert "1 h 10 min" in cells["0"] and "1 h 45 min" in cells["1"]  # SEED_TIMES
    assert "rank 5 · node-b" in cells["0"]  # where the primary failure landed
    assert 'href="/jobs/train-llama/cycles/3"' in html
    # the cycles on a time axis: one bar per cycle coloured by verdict, gaps = downtime
    tl = html[html.index('id="cycle-timeline"') :].split("</svg>")[0]
    bars = re.findall(r'<rect class="bar (\w+)" data-cycle="(\d+)"', tl)
    assert bars == [("restart", "0"), ("restart", "1"), ("restart", "2"), ("stop", "3")]
    assert tl.count('<rect class="gap"') == 3 and "time (UTC)" in tl
    assert "downtime before cycle 3: 10 min 00 s" in tl
    assert f'id="goodput-value">{SEED_GOODPUT}%<' in html
    # iterations over time: one point per cycle that reported progress, labelled axes
    it = html[html.index('id="iterations-chart"') :].split("</svg>")[0]
    assert it.count("<circle") == 3 and ">iteration<" in it and "time (UTC)" in it
    assert ">250<" in it and "cycle 1: iteration 250 (RESTART)" in it
    # where failures landed: ranks 5 (twice), 2 and 0; nodes node-b (twice), node-a
    ranks = html[html.index('id="strip-rank"') :].split("</svg>")[0]
    assert "rank 5 (2)" in ranks and "rank 2 (1)" in ranks and "rank 0 (1)" in ranks
    assert ranks.count('<rect class="cell') == 4
    nodes = html[html.index('id="strip-node"') :].split("</svg>")[0]
    assert "node-b (2)" in nodes and "node-a (2)" in nodes
    deciding = text_of(html[html.index('id="deciding"') :].split("</div>")[0])
    assert "STOP cycle 3" in deciding and "python_syntax_error" in deciding
    assert "data-live-ms" not in html  # a stopped job does not poll


def test_cycle_page_shows_verdict_evidence_cascades_budgets_fr(site: dict[str, Any]) -> None:
    html = http_get(site["url"] + "/jobs/train-llama/cycles/0").text
    primary = html[html.index('id="primary-evidence"') :].split("</div>\n</div>")[0]
    assert "<mark>NCCL WARN NET/IB : Got completion with error 12" in primary
    assert "line 120" in primary and "rank 5" in primary
    cascade = html[html.index('<details class="cascade">') :].split("</details>")[0]
    assert "nccl_watchdog_timeout" in cascade and "× 7" in cascade
    assert "0, 1, 2, 3, 4, 6, 7" in cascade  # folded: closed <details>, ranks inside
    assert '<details class="cascade" open' not in html
    assert 'id="fingerprint">nccl_network_error:Got completion with error N<' in html
    assert 'id="rule">infra_restart<' in html
    budgets = text_of(html[html.index('id="budgets"') :].split("</table>")[0])
    assert "same_root_no_progress_retries 3" in budgets and "job_no_progress_ceiling 5" in budgets
    assert 'id="culprit-ranks">5<' in html and "never entered collective" in html
    assert 'href="/jobs/train-llama/cycles/0/audit.json"' in html
    assert "No LLM explanation" in html


def test_cycle_page_llm_explanation_and_xss_is_escaped(site: dict[str, Any]) -> None:
    r = http_get(site["url"] + "/jobs/train-llama/cycles/2")
    html = r.text
    assert "The tokenizer rejected an input." in html
    assert "explanation: line 57: <code>ValueError: bad token</code>" in html
    meta = text_of(html[html.index('id="llm-meta"') :].split("</p>")[0])
    assert "owner: workload" in meta and "outlook: uncertain" in meta and "test-model" in meta
    assert "did not change the verdict: the model sees a data problem" in meta
    assert "ungrounded (quote is not in that line)" in html
    # The log line and the LLM text carry a script and an onerror handler: both escaped.
    assert XSS not in html and "<script>window" not in html and 'onerror="' not in html
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=" in html


def test_search_by_fingerprint_and_failure_class(site: dict[str, Any]) -> None:
    fp = "nccl_network_error:Got completion with error N"
    r = http_get(site["url"] + "/search", params={"fingerprint": fp})
    assert r.status_code == 200
    assert 'id="result-count">2 cycle(s)' in r.text
    links = re.findall(r'href="/jobs/train-llama/cycles/(\d+)"', r.text)
    assert sorted(links) == ["0", "1"]
    r = http_get(site["url"] + "/search", params={"failure_class": "python_syntax_error"})
    assert re.findall(r'href="/jobs/train-llama/cycles/(\d+)"', r.text) == ["3"]
    r = http_get(
        site["url"] + "/search", params={"failure_class": "nccl_network_error", "decision": "stop"}
    )
    assert "No analysed cycle matches." in r.text
    r = http_get(site["url"] + "/search")
    assert r.status_code == 200 and "result-count" not in r.text  # just the form


def test_audit_json_serves_the_artifact_or_the_stored_record(site: dict[str, Any]) -> None:
    r = http_get(site["url"] + "/jobs/train-llama/cycles/3/audit.json")
    assert r.status_code == 200 and r.json() == {"kind": "relaunch-audit", "cycle": 3}
    r = http_get(site["url"] + "/jobs/train-llama/cycles/1/audit.json")
    body = r.json()
    assert body["audit_path"] is None and body["record"]["verdict"]["rule"] == "progress_protects"


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/jobs/nope", 404, "no job &#39;nope&#39; in the history"),
        ("/jobs/train-llama/cycles/abc", 400, "cycle must be a non-negative integer"),
        ("/jobs/train-llama/cycles/-1", 400, "cycle must be a non-negative integer"),
        ("/jobs/train-llama/cycles/99", 404, "no cycle 99 of job"),
        ("/jobs/" + "x" * 300, 400, "job_id is longer than 255 characters"),
        ("/search?decision=MAYBE", 400, "decision must be STOP or RESTART"),
        ("/search?fingerprint=" + "f" * 5000, 400, "search term too long"),
    ],
)
def test_bad_input_gets_a_clear_error_page(
    site: dict[str, Any], path: str, status: int, message: str
) -> None:
    r = http_get(site["url"] + path)
    assert r.status_code == status
    assert message in r.text and "Traceback" not in r.text


def test_bad_static_and_audit_requests(site: dict[str, Any]) -> None:
    assert http_get(site["url"] + "/static/style.css").status_code == 200
    assert (
        http_get(site["url"] + "/static/live.js")
        .headers["content-type"]
        .startswith("text/javascript")
    )
    for bad in ("/static/..%2Froutes.py", "/static/routes.py", "/static/.hidden.css"):
        assert http_get(site["url"] + bad).status_code == 404
    r = http_get(site["url"] + "/jobs/train-llama/cycles/42/audit.json")
    assert r.status_code == 404 and "no cycle 42" in r.json()["error"]


def test_fragment_is_the_content_only_and_says_whether_to_keep_polling(
    site: dict[str, Any],
) -> None:
    r = http_get(site["url"] + "/", params={"fragment": "1"})
    assert "<html" not in r.text and "<h1>Jobs</h1>" in r.text
    assert r.headers["x-relaunch-live"] == "3000"
    r = http_get(site["url"] + "/jobs/train-llama", params={"fragment": "1"})
    assert r.headers["x-relaunch-live"] == "0"  # stopped job: the script stops polling
    assert 'id="timeline"' in r.text
    r = http_get(site["url"] + "/jobs/job-running")
    assert r.headers["x-relaunch-live"] == "3000" and "running" in r.text


def test_new_cycles_appear_while_a_job_runs(site: dict[str, Any]) -> None:
    from tests._web_helpers import make_verdict

    repo = site["repo"]
    before = http_get(site["url"] + "/jobs/job-running", params={"fragment": "1"}).text
    assert 'data-cycle="1"' not in before
    repo.save_verdict("job-running", 0, make_verdict("RESTART", "r0", None, iteration=10))
    repo.register_cycle("job-running", 1, "/logs/job-running/cycle_1.log")
    after = http_get(site["url"] + "/jobs/job-running", params={"fragment": "1"}).text
    assert 'data-cycle="1"' in after and "running" in text_of(after)


def test_templates_and_static_exist_for_packaging() -> None:
    web = Path(__file__).resolve().parents[2] / "web"
    for name in ("base.html", "jobs.html", "job.html", "cycle.html", "search.html", "error.html"):
        assert (web / "templates" / name).is_file()
    assert (web / "static" / "live.js").is_file() and (web / "static" / "style.css").is_file()


def test_job_ids_with_url_reserved_characters_round_trip(site: dict[str, Any]) -> None:
    from tests._web_helpers import make_verdict

    odd = "team:a+run=1@x"  # allowed by the job-id rule (storage.job_id), escaped in URLs
    repo = site["repo"]
    repo.register_cycle(odd, 0, "/logs/odd/cycle_0.log")
    repo.save_verdict(odd, 0, make_verdict("RESTART", "odd_rule", None, iteration=5))
    jobs = http_get(site["url"] + "/").text
    href = "/jobs/team%3Aa%2Brun%3D1%40x"
    assert f'href="{href}"' in jobs and odd in jobs
    job = http_get(site["url"] + href)
    assert job.status_code == 200 and 'id="timeline"' in job.text
    assert f'href="{href}/cycles/0"' in job.text
    cycle = http_get(site["url"] + href + "/cycles/0")
    assert cycle.status_code == 200 and 'id="rule">odd_rule<' in cycle.text
    audit = http_get(site["url"] + href + "/cycles/0/audit.json")
    assert audit.status_code == 200 and audit.json()["job_id"] == odd


def test_job_ids_with_slashes_or_markup_are_refused(site: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"job_id 'team/a run <b>#1\?': must be letters"):
        site["repo"].register_cycle("team/a run <b>#1?", 0, "/logs/odd/cycle_0.log")
    r = http_get(site["url"] + "/jobs/team%2Fa%20run%20%3Cb%3E%231%3F")
    assert r.status_code == 400 and "must be letters, digits" in r.text


def test_jobs_list_is_bounded(site: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import relaunch.web.routes

    monkeypatch.setattr(relaunch.web.routes, "JOBS_LIMIT", 1)
    html = http_get(site["url"] + "/").text
    assert len(re.findall(r'<tr class="job[ "]', html)) == 1
    assert 'id="jobs-limit">Showing the first 1 jobs (failing first' in html


def test_job_page_revalidates_with_etag_until_the_job_changes(site: dict[str, Any]) -> None:
    from tests._web_helpers import make_verdict

    url = site["url"] + "/jobs/job-running"
    first = http_get(url, params={"fragment": "1"})
    etag = first.headers["etag"]
    assert first.headers["cache-control"] == "no-cache"
    again = http_get(url, params={"fragment": "1"}, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["x-relaunch-live"] == "3000"
    full = http_get(url, headers={"If-None-Match": etag})  # the full page has its own tag
    assert full.status_code == 200
    site["repo"].save_verdict("job-running", 5, make_verdict("RESTART", "r5", None, iteration=50))
    changed = http_get(url, params={"fragment": "1"}, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and 'data-cycle="5"' in changed.text
    assert changed.headers["etag"] != etag


def test_cycle_that_is_not_analysed_yet_says_so_and_polls(site: dict[str, Any]) -> None:
    site["repo"].register_cycle("fresh-job", 7, "/logs/fresh/cycle_7.log")
    r = http_get(site["url"] + "/jobs/fresh-job/cycles/7")
    assert r.status_code == 200
    assert "Not analysed yet (status: registered)." in r.text
    assert "<dt>Exit cause</dt><dd>running</dd>" in r.text
    assert r.headers["x-relaunch-live"] == "3000"  # the verdict will appear by itself
    assert "No primary failure evidence" in r.text


def test_cycle_page_shows_node_health_reports(site: dict[str, Any]) -> None:
    repo = site["repo"]
    repo.save_node_health(
        "train-llama",
        1,
        {
            "node": "node3",
            "host": "gpu-<b>17</b>",
            "healthy": False,
            "reason": "external_service: IB port down <script>x</script>",
            "ran_this_cycle": True,
            "excluded_from_cycle": 2,
            "checks": [
                {"name": "external_service", "status": "fail", "detail": "ib0 down"},
                {"name": "nvml", "status": "not_available", "detail": "no driver"},
            ],
        },
    )
    html = http_get(site["url"] + "/jobs/train-llama/cycles/1").text
    table = text_of(html[html.index('id="node-health-table"') :].split("</table>")[0])
    assert "node3" in table and "unhealthy, ran this cycle" in table
    assert "cycle 2" in table and "external_service fail: ib0 down" in table
    assert "nvml" not in table  # only failed or broken checks are listed
    assert "not yet" in table  # the stored verdict of cycle 1 predates the report
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
    assert "gpu-&lt;b&gt;17&lt;/b&gt;" in html
    other = http_get(site["url"] + "/jobs/train-llama/cycles/0").text
    assert 'id="node-health"' not in other  # no reports: no section
