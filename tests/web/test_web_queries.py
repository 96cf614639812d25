"""storage/dashboard_queries.py on a real SQLite history, and the pages built on it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from relaunch import storage
from relaunch.storage import dashboard_queries as dq
from tests._web_helpers import DashboardServer, http_get, seed_history

FP = "nccl_network_error:Got completion with error N"


@pytest.fixture()
def repo(tmp_path: Any) -> Iterator[Any]:
    r = storage.open_repository(f"sqlite:///{tmp_path / 'relaunch.db'}")
    seed_history(r)
    seed_history(r, job_id="train-other")
    yield r
    r.close()


def test_timeline_is_light_ordered_and_bounded(repo: Any) -> None:
    rows = dq.timeline(repo, "train-llama")
    assert [r["cycle"] for r in rows] == [0, 1, 2, 3]
    assert "verdict" not in rows[0] and rows[0]["decision"] == "RESTART"
    assert rows[0]["last_iteration"] == 100 and rows[0]["started_at"].tzinfo is not None
    assert [r["llm"] is not None for r in rows] == [False, False, True, False]
    assert [r["cycle"] for r in dq.timeline(repo, "train-llama", limit=2)] == [2, 3]
    assert dq.timeline(repo, "no-such-job") == []
    for bad in (0, -1, True, "3"):
        with pytest.raises(ValueError, match="limit must be an integer"):
            dq.timeline(repo, "train-llama", limit=bad)  # type: ignore[arg-type]


def test_failure_classes_and_recurring_fingerprints(repo: Any) -> None:
    facets = {f["failure_class"]: f for f in dq.failure_classes(repo)}
    assert facets["nccl_network_error"] == {
        "failure_class": "nccl_network_error",
        "cycles": 4,
        "jobs": 2,
        "stops": 0,
    }
    assert facets["python_syntax_error"]["stops"] == 2
    assert next(iter(facets)) == "nccl_network_error"  # most frequent first
    rec = dq.recurring_fingerprints(repo)
    assert rec[0] == {
        "fingerprint": FP,
        "failure_class": "nccl_network_error",
        "cycles": 4,
        "jobs": 2,
    }
    assert all(r["cycles"] > 1 for r in rec)
    with pytest.raises(ValueError):
        dq.failure_classes(repo, limit=0)


def test_search_page_lists_facets_and_job_page_says_when_cut(
    repo: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import relaunch.web.routes

    monkeypatch.setattr(relaunch.web.routes, "TIMELINE_LIMIT", 2)
    with DashboardServer(repo) as server:
        html = http_get(server.base_url + "/search").text
        job = http_get(server.base_url + "/jobs/train-llama").text
    facets = html[html.index('id="facets"') :].split("</table>")[0]
    assert 'href="/search?failure_class=nccl_network_error"' in facets
    recurring = html[html.index('id="recurring"') :].split("</table>")[0]
    assert "nccl_network_error%3AGot%20completion%20with%20error%20N" in recurring
    assert 'id="timeline-limit">Showing the last 2 of 4 cycles.' in job
    assert 'data-cycle="3"' in job and 'data-cycle="1"' not in job
