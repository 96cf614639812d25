"""The dashboard inside the real `relaunch serve`, over history made by the real analysis.

Cycle logs are generated (tests/_web_helpers.write_job_logs), analysed one by one with
`relaunch analyze --db URL --job-id J --cycle N --format json` (each cycle sees the ones
before it), then the service's pages must show exactly what the analysis decided.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests._service_helpers import cli_env, running_service
from tests._web_helpers import JOB, REPO_ROOT, XSS, analyze, write_job_logs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("websvc")
    db_url = f"sqlite:///{tmp / 'relaunch.db'}"
    logs = write_job_logs(tmp / "logs")
    verdicts = [analyze(db_url, log, n) for n, log in enumerate(logs)]
    with running_service(tmp, db_url=db_url, root=tmp / "logs") as svc:
        yield {"svc": svc, "verdicts": verdicts, "logs": logs, "db_url": db_url}


def page(svc: Any, path: str) -> str:
    with svc.client() as c:
        r = c.get(path)
    assert r.status_code == 200, (path, r.status_code, r.text[:500])
    return r.text


def test_real_analysis_is_what_the_dashboard_shows(analysed: dict[str, Any]) -> None:
    svc, verdicts = analysed["svc"], analysed["verdicts"]
    assert [v["decision"] for v in verdicts][-1] == "STOP"  # SyntaxError on every rank
    jobs = page(svc, "/")
    row = jobs[jobs.index(f'data-job="{JOB}"') :].split("</tr>")[0]
    assert "decision-stop" in row and "cycle 2" in row

    job = page(svc, f"/jobs/{JOB}")
    rows = re.findall(r'<tr class="cycle [^"]*" data-cycle="(\d+)">(.*?)</tr>', job, re.S)
    assert [n for n, _ in rows] == ["0", "1", "2"]
    for (_, body), v in zip(rows, verdicts, strict=True):
        assert f"decision-{v['decision'].lower()}" in body
        assert v["rule"] in body
        last = (v.get("progress") or {}).get("last_iteration")
        if last is not None:
            assert f">{last}<" in body
    assert job.count("<circle") == sum(
        1 for v in verdicts if (v.get("progress") or {}).get("last_iteration") is not None
    )


def test_cycle_page_shows_the_primary_evidence_and_escapes_log_text(
    analysed: dict[str, Any],
) -> None:
    svc, verdicts = analysed["svc"], analysed["verdicts"]
    for n, v in enumerate(verdicts):
        html = page(svc, f"/jobs/{JOB}/cycles/{n}")
        assert f'id="rule">{v["rule"]}<' in html
        primary = v.get("primary")
        if primary:
            block = html[html.index('id="primary-evidence"') :]
            assert f"line {primary['line']}" in block
            assert primary["failure_class"] in block
    stop = page(svc, f"/jobs/{JOB}/cycles/2")
    assert "SyntaxError: unmatched &#39;)&#39;" in stop
    cycle1 = page(svc, f"/jobs/{JOB}/cycles/1")
    assert XSS not in cycle1 and "<script>window" not in cycle1


def test_search_finds_the_recurring_fingerprint(analysed: dict[str, Any]) -> None:
    svc, verdicts = analysed["svc"], analysed["verdicts"]
    fp = verdicts[0]["primary"]["fingerprint"]
    assert verdicts[1]["primary"]["fingerprint"] == fp  # stable across cycles and ranks
    with svc.client() as c:
        html = c.get("/search", params={"fingerprint": fp}).text
    assert sorted(re.findall(rf'href="/jobs/{JOB}/cycles/(\d+)"', html)) == ["0", "1"]


def test_service_api_and_dashboard_agree(analysed: dict[str, Any]) -> None:
    svc = analysed["svc"]
    with svc.client() as c:
        api = c.get(f"/v1/jobs/{JOB}/cycles/2").json()
        audit = c.get(f"/jobs/{JOB}/cycles/2/audit.json")
    assert audit.status_code == 200
    body = audit.json()
    decision = body.get("record", body).get("decision") or body.get("verdict", {}).get("decision")
    assert decision == "STOP"
    assert json.dumps(api).count("STOP") >= 1


def test_llm_explanation_from_a_real_enrichment_is_shown(analysed: dict[str, Any]) -> None:
    from tests._llm_helpers import answer
    from tests._llm_server import LLMServer

    llm = LLMServer().start()
    try:
        model = llm.script([{"status": 200, "content": answer(4, quote="SyntaxError: unmatched")}])
        argv = [sys.executable, "-m", "relaunch.cli", "analyze", str(analysed["logs"][2])]
        argv += ["--db", analysed["db_url"], "--job-id", "llm-job", "--cycle", "0", "--llm"]
        argv += ["--ft-llm-base-url", llm.base_url, "--ft-llm-model", model, "--format", "json"]
        r = subprocess.run(
            argv, env=cli_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
        )
    finally:
        llm.stop()
    assert r.returncode == 0, r.stderr
    verdict = json.loads(r.stdout)
    assert verdict["llm"]["status"] == "ok"
    html = page(analysed["svc"], "/jobs/llm-job/cycles/0")
    assert f'id="llm-text">{verdict["llm"]["explanation"]}<' in html
    meta = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html[html.index('id="llm-meta"') :]))
    assert "owner: workload" in meta and "outlook: will_not_recover" in meta
    assert "grounded" in meta and model in meta
    assert "explanation: line 4: <code>SyntaxError: unmatched</code>" in html


def test_fr_dumps_uploaded_to_the_service_show_on_the_cycle_page(analysed: dict[str, Any]) -> None:
    from tests._fr_helpers import stalled_allreduce_job, write_dumps

    svc = analysed["svc"]
    dumps = write_dumps(stalled_allreduce_job(4, culprits=[1]), analysed["logs"][0].parent / "fr")
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in dumps]
    with svc.client(timeout=60) as c:
        r = c.post("/v1/jobs/fr-job/cycles/0/fr", files=files)
    assert r.status_code == 200, r.text
    assert r.json()["findings"]["culprit_ranks"] == [1]
    html = page(svc, "/jobs/fr-job/cycles/0")
    assert 'id="culprit-ranks">1<' in html
    groups = html[html.index('id="fr-groups"') :].split("</table>")[0]
    assert "default_pg" in groups and "stalled" in groups and "all_reduce seq 5" in groups
    assert "rank 1: default_pg: never reached" in html


def test_api_docs_are_served_without_a_cdn(analysed: dict[str, Any]) -> None:
    svc = analysed["svc"]
    with svc.client() as c:
        docs = c.get("/docs")
        redoc = c.get("/redoc")
        assets = {n: c.get(f"/docs-assets/{n}") for n in ("swagger-ui-bundle.js", "swagger-ui.css")}
        redoc_js = c.get("/docs-assets/redoc.standalone.js")
        bad = [c.get(p) for p in ("/docs-assets/..%2Fcore.py", "/docs-assets/core.py")]
        spec = c.get("/openapi.json")
    assert docs.status_code == 200 and redoc.status_code == 200
    for page in (docs.text, redoc.text):  # every script and stylesheet is local
        urls = re.findall(r'(?:src|href)="([^"]+)"', page) + re.findall(r"url: '([^']+)'", page)
        assert urls and all(u.startswith("/") for u in urls), urls
    assert "/docs-assets/swagger-ui-bundle.js" in docs.text and "/openapi.json" in docs.text
    assert "/docs-assets/redoc.standalone.js" in redoc.text
    assert assets["swagger-ui-bundle.js"].headers["content-type"].startswith("text/javascript")
    assert len(assets["swagger-ui-bundle.js"].content) > 100_000
    assert assets["swagger-ui.css"].headers["content-type"].startswith("text/css")
    assert redoc_js.status_code == 200 and len(redoc_js.content) > 100_000
    assert [b.status_code for b in bad] == [404, 404]
    assert spec.json()["info"]["title"] == "relaunch attribution service"


@pytest.mark.parametrize(
    "path",
    ["/", "/docs", "/redoc", "/openapi.json", "/healthz", "/v1/jobs", f"/jobs/{JOB}/cycles/2/log"],
)
def test_head_works_on_every_get_route_of_the_service(analysed: dict[str, Any], path: str) -> None:
    with analysed["svc"].client() as c:
        get, head = c.get(path), c.head(path)
    assert get.status_code == 200, (path, get.text[:200])
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    assert head.headers.get("content-length") == get.headers.get("content-length")


def test_raw_log_through_the_service_allowed_root(analysed: dict[str, Any]) -> None:
    svc, verdicts, logs = analysed["svc"], analysed["verdicts"], analysed["logs"]
    line = verdicts[2]["primary"]["line"]
    html = page(svc, f"/jobs/{JOB}/cycles/2")
    assert f'id="raw-log-link" href="/jobs/{JOB}/cycles/2/log?around={line}#L{line}"' in html
    raw = page(svc, f"/jobs/{JOB}/cycles/2/log?around={line}")
    anchored = re.search(
        rf'id="L{line}"><a class="ln" href="#L{line}" tabindex="-1">{line}</a>([^\n]*)', raw
    )
    expected = logs[2].read_text().splitlines()[line - 1]
    assert anchored and anchored.group(1) == expected.replace("'", "&#39;")
    assert verdicts[2]["primary"]["text"] in expected
    with svc.client() as c:
        txt = c.get(f"/jobs/{JOB}/cycles/2/log.txt")
    assert txt.text == logs[2].read_text()


def test_an_uploaded_log_can_be_followed_on_the_dashboard(analysed: dict[str, Any]) -> None:
    svc = analysed["svc"]
    with svc.client() as c:
        r = c.post(
            "/v1/jobs/upload-job/cycles/0/log",
            params={"final": "false"},
            content=b"[rank0]: step 1\n[rank0]: step 2\n",
        )
        assert r.status_code == 200, r.text
        first = c.get("/jobs/upload-job/cycles/0/log", params={"follow": "1"})
        assert first.status_code == 200 and 'id="L2"' in first.text
        offset = int(re.search(r'data-offset="(\d+)"', first.text).group(1))  # type: ignore[union-attr]
        c.post(
            "/v1/jobs/upload-job/cycles/0/log",
            params={"final": "false", "append": "true"},
            content=b"[rank0]: step 3\n",
        )
        tail = c.get("/jobs/upload-job/cycles/0/log/tail", params={"offset": offset}).json()
    assert tail["lines"] == ["[rank0]: step 3"] and tail["live"] is True
