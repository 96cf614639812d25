"""Headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) on the real service.

The dashboard is served by a real `relaunch serve` process over a real SQLite history;
the browser clicks jobs -> job -> cycle -> raw log and checks what a person sees: the
filters, live updates without a reload (a new verdict, a growing log), keyboard
navigation with a visible focus, contrast and other WCAG 2 A/AA rules (axe-core, from the
`axe-playwright-python` package), and the API docs with every non-loopback request
blocked. One screenshot per page goes to artifacts/screenshots/ (gitignored; the path is
printed).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relaunch import storage
from tests._service_helpers import running_service
from tests._web_helpers import (
    JOB,
    REPO_ROOT,
    SEED_GOODPUT,
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
        yield {"base": svc.base_url, "repo": repo, "real": real, "logs": tmp / "logs"}
    repo.close()


def shot(page: Any, name: str, *, full_page: bool = True) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 1000  # a real image, not an empty file
    print(f"screenshot: {path}")
    return path


def test_click_through_jobs_job_cycle(browser: Any, service: dict[str, Any]) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(service["base"] + "/")
    row = page.locator('tr[data-job="train-llama"]')
    assert row.locator(".decision-stop").inner_text() == "STOP"
    assert "stopped" in row.inner_text()
    assert "step 200" in row.locator("td.ckpt").inner_text()
    shot(page, "01-jobs")

    row.locator("a.job-link").click()
    page.wait_for_url("**/jobs/train-llama")
    assert page.locator("h1").inner_text().startswith("Job train-llama")
    assert page.locator("#timeline tbody tr").count() == 4
    assert page.locator("#iterations-chart circle").count() == 3
    assert page.locator("#cycle-timeline rect.bar").count() == 4
    assert page.locator("#cycle-timeline rect.bar.stop").count() == 1
    assert page.locator("#goodput-value").inner_text() == f"{SEED_GOODPUT}%"
    assert page.locator("#strip-rank rect.cell").count() == 4
    assert page.locator("#cycle-timeline").is_visible()
    assert "250" in page.locator('tr[data-cycle="1"]').inner_text()
    # the newest complete checkpoint (cycle 1's, SEED_CHECKPOINT) and the time lost since it
    assert page.locator("#checkpoint-step").inner_text() == "step 200"
    assert "persistent tier" in page.locator("#job-checkpoint").inner_text()
    assert page.locator("#checkpoint-lost").inner_text() == "time lost since it: 1 h 06 min"
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
    page.goto(service["base"] + "/search")
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
    line = real[2]["primary"]["line"]
    traceback = page.locator("#traceback")
    assert traceback.is_visible() and "Traceback (most recent call last)" in traceback.inner_text()
    assert traceback.locator("mark").inner_text().endswith(real[2]["primary"]["text"])
    assert page.locator("#next-step").inner_text().startswith("Next step: Do not restart")
    shot(page, "10-real-cycle-stop")
    page.locator("#raw-log-link").click()
    page.wait_for_url(f"**/jobs/{JOB}/cycles/2/log?around={line}#L{line}")
    target = page.locator(f"#L{line}")
    assert target.is_visible() and real[2]["primary"]["text"] in target.inner_text()
    assert page.evaluate("getComputedStyle(document.querySelector(':target')).backgroundColor") != (
        "rgba(0, 0, 0, 0)"
    )  # the anchored line is highlighted
    shot(page, "12-raw-log-anchor")
    page.goto(service["base"] + f"/jobs/{JOB}/cycles/1")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    shot(page, "11-real-cycle-restart")


def test_jobs_list_filters_from_the_form(browser: Any, service: dict[str, Any]) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(service["base"] + "/")
    rows = page.locator("#jobs tbody tr")
    first = rows.first.get_attribute("data-job")
    assert first in ("train-llama", "stopped-early", JOB)  # stopped jobs come first
    early = page.locator('tr[data-job="stopped-early"]')
    assert "STOP" in early.inner_text() and "cuda_oom" in early.inner_text()
    assert "rank 3 · node-c" in early.inner_text()
    page.select_option("#f-state", "stopped")
    page.fill("#f-class", "cuda_oom")
    page.click('#filters button[type="submit"]')
    page.wait_for_url(re.compile(r".*state=stopped.*failure_class=cuda_oom.*"))
    assert [rows.nth(i).get_attribute("data-job") for i in range(rows.count())] == ["stopped-early"]
    assert page.locator("#f-class").input_value() == "cuda_oom"
    shot(page, "13-jobs-filtered")
    page.locator("#f-reset").click()
    page.wait_for_url(service["base"] + "/")
    page.fill("#f-until", "2000-01-01")
    page.press("#f-until", "Enter")
    page.wait_for_url(re.compile(r".*until=2000-01-01.*"))
    assert page.locator("#no-match").is_visible()
    assert page.locator("#count-stopped .n").inner_text() == "0"


def test_jobs_list_shows_a_new_verdict_without_reload(
    browser: Any, service: dict[str, Any]
) -> None:
    repo = service["repo"]
    repo.register_cycle("live-list", 0, "/logs/live-list/cycle_0.log")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(service["base"] + "/")
    row = page.locator('tr[data-job="live-list"]')
    assert "running" in row.inner_text() and row.locator(".decision-stop").count() == 0
    page.evaluate("window.__still_this_page = 1")
    repo.save_verdict(
        "live-list",
        0,
        make_verdict("STOP", "live_stop", None, iteration=None, basis="stored while open"),
    )
    # live.js refreshes the list every 3 s: the STOP and the new state appear by themselves
    row.locator(".decision-stop").wait_for(timeout=20_000)
    assert "stopped" in row.inner_text() and "stored while open" in row.inner_text()
    assert page.evaluate("window.__still_this_page") == 1  # no reload happened
    shot(page, "14-jobs-live-update")


def test_a_running_cycle_log_is_followed(browser: Any, service: dict[str, Any]) -> None:
    log = service["logs"] / "follow.log"
    log.write_text("".join(f"[rank0]: step {i}\n" for i in range(1, 6)))
    service["repo"].register_cycle("follow-job", 0, str(log))
    page = browser.new_page(viewport={"width": 1280, "height": 700})
    page.goto(service["base"] + "/jobs/follow-job/cycles/0")
    page.locator("#raw-log-link").click()  # "follow the log" for a running cycle
    page.wait_for_url("**/jobs/follow-job/cycles/0/log?follow=1")
    assert page.locator("#L5").inner_text().strip().endswith("[rank0]: step 5")
    with open(log, "a") as fh:
        fh.write("[rank0]: step 6\n[rank0]: NCCL WARN something new\n")
    page.locator("#L7").wait_for(timeout=20_000)  # appended by logtail.js, no reload
    assert page.locator("#L7").inner_text().strip().endswith("NCCL WARN something new")
    assert "Following" in page.locator("#follow-status").inner_text()
    shot(page, "15-log-follow")


def test_keyboard_reaches_filters_and_links_with_a_visible_focus(
    browser: Any, service: dict[str, Any]
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(service["base"] + "/")
    seen: list[str] = []
    for _ in range(40):
        page.keyboard.press("Tab")
        info = page.evaluate(
            """() => {
              const el = document.activeElement;
              const cs = getComputedStyle(el);
              return {id: el.id, tag: el.tagName, cls: el.className, text: el.textContent.trim(),
                      outline: cs.outlineStyle, width: parseFloat(cs.outlineWidth)};
            }"""
        )
        assert info["outline"] != "none" and info["width"] >= 2, info  # focus is visible
        seen.append(info["id"] or f"{info['tag']}.{info['cls']}:{info['text'][:20]}")
        if info["id"] == "f-reset" or info["cls"] == "job-link":
            break
    assert seen[0].startswith("A.skip")  # the skip link comes first
    filters = ["f-state", "f-job", "f-class", "f-window", "f-since", "f-until"]
    assert [s for s in seen if s in filters] == filters  # every filter, in reading order
    assert any(s.startswith("count-") for s in seen)
    assert any(":Search" in s for s in seen) and any(s.startswith("A.job-link") for s in seen)
    shot(page, "16-keyboard-focus", full_page=False)
    # Enter on a focused job link opens it
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r".*/jobs/[^/]+$"))
    assert page.locator("h1").inner_text().startswith("Job ")


AXE_PAGES = [
    "/",
    "/?state=stopped",
    "/jobs/train-llama",
    "/jobs/train-llama/cycles/0",
    "/jobs/train-llama/cycles/2",
    f"/jobs/{JOB}/cycles/2",
    f"/jobs/{JOB}/cycles/1/log?around=30",
    "/search",
    "/search?failure_class=nccl_network_error",
]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_pages_pass_axe_wcag_a_and_aa_contrast_included(
    browser: Any, service: dict[str, Any], scheme: str
) -> None:
    try:
        import axe_playwright_python
    except ImportError:
        pytest.skip("axe-playwright-python (it ships axe-core's axe.min.js) is not installed")
    axe = (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text()
    # The pages allow only their own scripts (CSP); the test context lets axe in. The
    # stylesheet has a dark theme for `prefers-color-scheme: dark`: both are checked.
    ctx = browser.new_context(
        bypass_csp=True, color_scheme=scheme, viewport={"width": 1280, "height": 900}
    )
    page = ctx.new_page()
    problems = []
    for path in AXE_PAGES:
        page.goto(service["base"] + path)
        page.evaluate(axe)
        result = page.evaluate(
            "() => axe.run(document, {runOnly: {type: 'tag', values: "
            "['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})"
        )
        assert any(p["id"] == "color-contrast" for p in result["passes"]), path  # it ran
        for v in result["violations"]:
            problems.append(
                f"{path}: {v['id']} ({v['impact']}): "
                + "; ".join(n["target"][0] for n in v["nodes"][:3])
            )
    if scheme == "dark":
        for name, path in [("19-dark-jobs", "/"), ("20-dark-job", "/jobs/train-llama")]:
            page.goto(service["base"] + path)
            shot(page, name)
        page.goto(service["base"] + f"/jobs/{JOB}/cycles/2")
        shot(page, "21-dark-cycle")
    ctx.close()
    assert not problems, "\n".join(problems)


def test_api_docs_render_offline(browser: Any, service: dict[str, Any]) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    outside: list[str] = []

    def only_loopback(route: Any) -> None:
        if route.request.url.startswith(service["base"]):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_loopback)
    page.goto(service["base"] + "/docs")
    title = page.locator(".swagger-ui .info .title")
    title.wait_for(timeout=20_000)
    assert "relaunch attribution service" in title.inner_text()
    assert page.locator(".opblock-summary-path", has_text="/v1/jobs").first.is_visible()
    shot(page, "17-api-docs")
    page.goto(service["base"] + "/redoc")
    page.locator("h1", has_text="relaunch attribution service").wait_for(timeout=20_000)
    shot(page, "18-api-redoc", full_page=False)
    # Scripts, styles and the spec come from the service; ReDoc's own bundle also asks for
    # its decorative footer logo, which simply does not load offline.
    assert [u for u in outside if not u.endswith("/redoc/logo-mini.svg")] == [], outside
