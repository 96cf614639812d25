"""How each job ended, on every page: the jobs list, the job page, /v1/jobs and the cycle
page's advice, for succeeded, failed, stopped, interrupted and lost jobs; which verdict the
launcher acted on and which it only recorded. A real `relaunch serve` over a real SQLite
history; the browser test (headless Chromium) takes one screenshot per end state."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relaunch import storage
from relaunch.storage.models import Job
from tests._service_helpers import running_service
from tests._web_helpers import _ev, http_get, make_verdict

OOM = _ev(44, "cuda_oom", "torch.OutOfMemoryError: CUDA out of memory", rank=3, fp="cuda_oom:N")
NCCL = _ev(12, "nccl_network_error", "NCCL WARN NET/IB : error 12", rank=1, fp="nccl:N")
LOST_REASON = "no launcher of the job was heard from for 600 s"

# job -> (state, exit code, end reason, deciding decision, its cycle, what it did)
EXPECTED = {
    "end-succeeded": ("succeeded", 0, "all ranks exited with code 0", "RESTART", 0, "acted"),
    "end-failed": ("failed", 1, "restart budget (2) spent", "STOP", 1, "recorded"),
    "end-stopped": (
        "stopped",
        3,
        "STOP verdict for cycle 1: cuda_oom will recur",
        "STOP",
        1,
        "acted",
    ),  # fmt: skip
    "end-interrupted": (
        "interrupted",
        143,
        "the launcher received SIGTERM; workers stopped",
        None,
        None,
        None,
    ),  # fmt: skip
    "end-lost": ("lost", None, LOST_REASON, "RESTART", 0, "recorded"),
    "end-running": ("stopped", None, None, "STOP", 0, "pending"),  # STOP saved, job runs on
}


def seed(repo: Any) -> None:
    restart = make_verdict("RESTART", "infra_restart", NCCL, iteration=10)
    stop = make_verdict("STOP", "workload_certain_stop", OOM, iteration=10)
    # succeeded: a RESTART (acted on: cycle 1 started), then cycle 1 ran to the end
    repo.save_verdict("end-succeeded", 0, restart)
    repo.register_cycle("end-succeeded", 1, "/x/c1.log")
    repo.end_cycle("end-succeeded", 1, "succeeded", reason="all ranks exited with code 0")
    repo.end_job("end-succeeded", "succeeded", 0, reason="all ranks exited with code 0")
    # failed: a STOP only recorded (log mode): the launcher restarted until the budget ran out
    repo.save_verdict("end-failed", 0, restart)
    repo.save_verdict("end-failed", 1, stop)
    repo.register_cycle("end-failed", 2, "/x/f2.log")
    repo.end_cycle("end-failed", 2, "failed", reason="rank 3 exited with code 1")
    repo.end_job("end-failed", "failed", 1, reason="restart budget (2) spent")
    # stopped: the launcher acted on the STOP (--ft-attribution-stop-action no-restart)
    repo.save_verdict("end-stopped", 0, restart)
    repo.save_verdict("end-stopped", 1, stop)
    repo.end_job("end-stopped", "stopped", 3, reason=EXPECTED["end-stopped"][2])
    # interrupted: SIGTERM during cycle 0, which was never analysed
    repo.register_cycle("end-interrupted", 0, "/x/i0.log")
    repo.end_job("end-interrupted", "interrupted", 143, reason=EXPECTED["end-interrupted"][2])
    # lost (a state the multi-node launcher records): stored as a plain state string
    repo.save_verdict("end-lost", 0, restart)
    with repo.write_session() as session:
        job = session.query(Job).filter(Job.job_id == "end-lost").one()
        job.state, job.end_reason = "lost", LOST_REASON
    # a STOP saved while the launcher runs on (log mode): pending, not "stopped by relaunch"
    repo.save_verdict("end-running", 0, stop)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("jobend")
    url = f"sqlite:///{tmp / 'relaunch.db'}"
    repo = storage.open_repository(url)
    seed(repo)
    with running_service(tmp, db_url=url, root=tmp) as svc:
        yield {"base": svc.base_url, "repo": repo}
    repo.close()


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_v1_jobs_says_how_each_job_ended(site: dict[str, Any]) -> None:
    jobs = {j["job_id"]: j for j in http_get(site["base"] + "/v1/jobs").json()["jobs"]}
    for job_id, (state, code, reason, decision, cycle, effect) in EXPECTED.items():
        j = jobs[job_id]
        got = (j["state"], j["exit_code"], j["end_reason"], j["last_decision"])
        assert got == (state, code, reason, decision), job_id
        assert (j["decision_cycle"], j["verdict_effect"]) == (cycle, effect), job_id
    # the STOPped job's deciding STOP is not hidden by its later, never-analysed cycle
    assert jobs["end-failed"]["last_cycle"] == 2 and jobs["end-failed"]["last_decision"] == "STOP"


def test_jobs_list_shows_end_and_what_the_verdict_did(site: dict[str, Any]) -> None:
    html = http_get(site["base"] + "/").text
    rows = dict(re.findall(r'<tr class="job[^"]*" data-job="([^"]+)">(.*?)</tr>', html, re.S))
    for job_id, (state, code, reason, _decision, _cycle, effect) in EXPECTED.items():
        row = _text(rows[job_id])
        assert state in row, job_id
        if code is not None:
            assert f"exit {code}" in row, row
        else:
            assert ("not ended" if job_id == "end-running" else "no exit code") in row, row
        if reason:
            assert reason in row
        badge = {"acted": "acted on", "recorded": "recorded only", "pending": "pending"}
        if effect:
            assert badge[effect] in row, row
    counts = dict((b, int(a)) for a, b in re.findall(r'<span class="n">(\d+)</span> (\w+)', html))
    assert counts["interrupted"] == 1 and counts["lost"] == 1 and counts["stopped"] == 2
    # `lost` is a job state (JobState.LOST, a job whose launchers stopped renewing their
    # leases): its count is a filter like the others, and the filter shows that job only
    assert 'href="/?state=lost"' in html
    lost = http_get(site["base"] + "/?state=lost").text
    shown = re.findall(r'<tr class="job[^"]*" data-job="([^"]+)">', lost)
    assert shown == ["end-lost"], shown


@pytest.mark.parametrize(
    ("job_id", "says"),
    [
        ("end-failed", "recorded only: the launcher did not stop the job on it"),
        ("end-stopped", "acted on: the launcher ended the job on this STOP"),
        ("end-running", "pending: the job ends on it only with --ft-attribution-stop-action"),
    ],
)
def test_job_page_shows_end_and_effect(site: dict[str, Any], job_id: str, says: str) -> None:
    html = http_get(site["base"] + f"/jobs/{job_id}").text
    _state, code, reason, *_ = EXPECTED[job_id]
    end = _text(re.search(r"<p class=\"job-end\" id=\"job-end\">(.*?)</p>", html, re.S)[1]).strip()  # type: ignore[index]
    if job_id == "end-running":
        assert end.startswith("Not ended: the launcher has not reported an end")
    else:
        assert end.startswith("Ended:") and f"exit code {code}" in end and reason in end
    assert says in _text(html)


def test_ended_unanalysed_cycle_gets_no_stale_advice(site: dict[str, Any]) -> None:
    html = _text(http_get(site["base"] + "/jobs/end-interrupted/cycles/0").text)
    assert "ask again after it ends" not in html and "still running" not in html
    assert "ended without a verdict" in html and "relaunch analyze" in html


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_browser_shows_every_end_state(site: dict[str, Any], scheme: str) -> None:
    """Chromium: the jobs list and each job page show exit code and end reason; axe-core
    finds no WCAG A/AA problem (contrast of the new badges included); one screenshot each."""
    from tests.web.test_browser import ARGS, CHROMIUM, _playwright_or_skip, shot

    sync_playwright = _playwright_or_skip()
    try:
        import axe_playwright_python
    except ImportError:
        axe = None
    else:
        axe = (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text()
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = browser.new_context(
            bypass_csp=axe is not None, color_scheme=scheme, viewport={"width": 1400, "height": 900}
        )
        page = ctx.new_page()

        def check_axe(path: str) -> None:
            if axe is None:
                return
            page.evaluate(axe)
            result = page.evaluate(
                "() => axe.run(document, {runOnly: {type: 'tag', values: "
                "['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})"
            )
            for v in result["violations"]:
                problems.append(f"{path}: {v['id']}: {v['nodes'][0]['target'][0]}")

        page.goto(site["base"] + "/")
        for job_id, (_state, code, reason, _d, _c, _e) in EXPECTED.items():
            cell = page.locator(f'tr[data-job="{job_id}"] td.end').inner_text()
            if code is not None:
                assert f"exit {code}" in cell, (job_id, cell)
            if reason:
                assert reason in cell, (job_id, cell)
        assert page.locator("#count-interrupted .n").inner_text() == "1"
        assert page.locator("#count-lost .n").inner_text() == "1"
        check_axe("/")
        shot(page, f"30-{scheme}-jobs-end")
        for job_id, (state, code, reason, *_rest) in EXPECTED.items():
            if job_id == "end-running":
                continue
            page.goto(site["base"] + f"/jobs/{job_id}")
            end = page.locator("#job-end").inner_text()
            assert end.startswith("Ended:"), end
            assert (f"exit code {code}" if code is not None else "no exit code") in end, end
            assert reason in end and state in page.locator("h1").inner_text()
            check_axe(f"/jobs/{job_id}")
            shot(page, f"31-{scheme}-job-{state}")
        page.goto(site["base"] + "/jobs/end-interrupted/cycles/0")
        assert "ended without a verdict" in page.locator("#next-step").inner_text()
        ctx.close()
        browser.close()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("top", [1, 2, 3, 7, 10, 13, 250, 100_000])
def test_iteration_ticks_never_repeat_a_label(top: int) -> None:
    from relaunch.web.charts import nice_ticks

    labels = [f"{int(v):,}" for v in nice_ticks(0, top, integer=True)]
    assert len(labels) == len(set(labels)) >= 2 and labels[0] == "0", labels
    assert float(labels[-1].replace(",", "")) >= top
