"""Headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) on the real service.

The dashboard is served by a real `relaunch serve` process over a real SQLite history;
the browser clicks jobs -> job -> cycle and checks what a person sees. One screenshot per
page goes to artifacts/screenshots/ (gitignored).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

import storage
from tests._service_helpers import running_service
from tests._web_helpers import (
    JOB,
    REPO_ROOT,
    analyze,
    make_verdict,
    seed_history,
    write_job_logs,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = REPO_ROOT / "artifacts" / "screenshots"


def _playwright_or_skip() -> Any:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright Python package is not installed")
    return sync_playwright


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_playwright = _playwright_or_skip()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("browser")
    url = f"sqlite:///{tmp / 'relaunch.db'}"
    repo = storage.open_repository(url)
    seed_history(repo)
    # A second job made by the real analysis: `relaunch analyze --db` on generated logs.
    real = [analyze(url, log, n) for n, log in enumerate(write_job_logs(tmp / "logs"))]
    with running_service(tmp, db_url=url, root=tmp / "logs") as svc:
        yield {"base": svc.base_url, "repo": repo, "real": real}
    repo.close()


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000  # a real image, not an empty file


def test_click_through_jobs_job_cycle(browser: Any, service: dict[str, Any]) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(service["base"] + "/")
    row = page.locator('tr[data-job="train-llama"]')
    assert row.locator(".decision-stop").inner_text() == "STOP"
    assert "stopped" in row.inner_text()
    shot(page, "01-jobs")

    row.locator("a.job-link").click()
    page.wait_for_url("**/jobs/train-llama")
    assert page.locator("h1").inner_text().startswith("Job train-llama")
    assert page.locator("#timeline tbody tr").count() == 4
    assert page.locator("#progress-plot circle").count() == 3
    assert "250" in page.locator('tr[data-cycle="1"]').inner_text()
    shot(page, "02-job")

    page.locator('tr[data-cycle="3"] a.cycle-link').click()
    page.wait_for_url("**/jobs/train-llama/cycles/3")
    verdict = page.locator("#verdict")
    assert verdict.locator(".decision-stop").first.inner_text() == "STOP"
    assert page.locator("#rule").inner_text() == "workload_certain_stop"
    assert "cannot heal by restarting" in page.locator("#basis").inner_text()
    primary = page.locator("#primary-evidence mark")
    assert primary.is_visible()
    assert primary.inner_text() == "SyntaxError: invalid syntax (train.py, line 88)"
    assert page.locator("#fingerprint").inner_text() == "python_syntax_error:invalid syntax"
    shot(page, "03-cycle-stop")
    assert not errors, errors


def test_cascades_are_folded_until_opened(browser: Any, service: dict[str, Any]) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(service["base"] + "/jobs/train-llama/cycles/0")
    assert page.locator("#primary-evidence mark").inner_text().startswith("NCCL WARN NET/IB")
    assert page.locator("#culprit-ranks").inner_text() == "5"
    cascade = page.locator("details.cascade").first
    example = cascade.locator("pre")
    assert not example.is_visible()  # folded
    cascade.locator("summary").click()
    assert example.is_visible() and "Watchdog caught collective" in example.inner_text()
    shot(page, "04-cycle-restart-cascade-open")


def test_untrusted_log_text_is_shown_not_run(browser: Any, service: dict[str, Any]) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(service["base"] + "/jobs/train-llama/cycles/2")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    text = page.locator("#primary-evidence mark").inner_text()
    assert "<script>window.__pwned=1</script>" in text  # visible as text
    assert "The tokenizer rejected an input." in page.locator("#llm-text").inner_text()
    shot(page, "05-cycle-xss-escaped")


def test_search_by_failure_class_from_the_form(browser: Any, service: dict[str, Any]) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(service["base"] + "/")
    page.fill('input[name="failure_class"]', "nccl_network_error")
    page.click('form.search button[type="submit"]')
    page.wait_for_url(re.compile(r".*/search\?.*failure_class=nccl_network_error.*"))
    real = sum(
        1
        for v in service["real"]
        if (v["primary"] or {}).get("failure_class") == "nccl_network_error"
    )
    assert page.locator("#result-count").inner_text().startswith(f"{2 + real} cycle(s)")
    shot(page, "06-search")


def test_readable_without_javascript(browser: Any, service: dict[str, Any]) -> None:
    ctx = browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.goto(service["base"] + "/jobs/train-llama/cycles/3")
    assert page.locator("#verdict .decision-stop").first.inner_text() == "STOP"
    assert page.locator("#primary-evidence mark").is_visible()
    shot(page, "07-cycle-no-js")
    ctx.close()


def test_running_job_page_updates_itself(browser: Any, service: dict[str, Any]) -> None:
    repo = service["repo"]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(service["base"] + "/jobs/job-running")
    assert page.locator("#timeline tbody tr").count() == 1
    repo.save_verdict(
        "job-running", 0, make_verdict("RESTART", "progress_protects", None, iteration=40)
    )
    repo.register_cycle("job-running", 1, "/logs/job-running/cycle_1.log")
    # live.js polls every 3 s; the new cycle appears without a reload.
    page.locator('#timeline tr[data-cycle="1"]').wait_for(timeout=15_000)
    assert page.locator('tr[data-cycle="0"] .decision-restart').inner_text() == "RESTART"
    assert "live" in page.locator("#live-status").inner_text()
    shot(page, "08-job-live-update")


def test_click_through_a_job_made_by_the_real_analysis(
    browser: Any, service: dict[str, Any]
) -> None:
    real = service["real"]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(service["base"] + "/")
    page.locator(f'tr[data-job="{JOB}"] a.job-link').click()
    page.wait_for_url(f"**/jobs/{JOB}")
    rows = page.locator("#timeline tbody tr")
    assert rows.count() == len(real)
    for n, v in enumerate(real):
        assert v["decision"] in rows.nth(n).inner_text()
    shot(page, "09-real-job")
    page.locator('tr[data-cycle="2"] a.cycle-link').click()
    page.wait_for_url(f"**/jobs/{JOB}/cycles/2")
    assert page.locator("#verdict .decision-stop").first.inner_text() == "STOP"
    assert page.locator("#rule").inner_text() == real[2]["rule"]
    mark = page.locator("#primary-evidence mark")
    assert mark.is_visible() and mark.inner_text() == real[2]["primary"]["text"]
    assert "SyntaxError" in mark.inner_text()
    shot(page, "10-real-cycle-stop")
    page.goto(service["base"] + f"/jobs/{JOB}/cycles/1")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    shot(page, "11-real-cycle-restart")
