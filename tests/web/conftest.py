"""Tests of the dashboard (web/): the router on uvicorn over a real SQLite history, the on-call pages,
checkpoint and job-end views, the straggler strip, the dashboard inside `relaunch serve`,
and headless Chromium (test_browser.py; skipped with the reason without chromium).

Fixtures: none of its own; it uses the root conftest's `repo`.
"""
