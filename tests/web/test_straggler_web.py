"""The cycle page's straggler strip, served by uvicorn on 127.0.0.1 over a real SQLite file."""

from __future__ import annotations

import re
from pathlib import Path

from relaunch import storage
from tests._web_helpers import DashboardServer, http_get

SCORES = {
    "named": [{"rank": 2, "node": None, "section": "fwd", "relative": 0.2, "reports": 4}],
    "persistent": [2],
    "scores": [
        {
            "node": None,
            "threshold": 0.7,
            "reports": 6,
            "ranks": {
                "0": {"relative": 1.01, "lowest": 0.95, "below": 0, "section": "fwd"},
                "1": {"relative": 0.99, "lowest": 0.8, "below": 0, "section": "fwd"},
                "2": {"relative": 0.2, "lowest": 0.19, "below": 6, "section": "fwd"},
                "3": {"relative": 1.0, "lowest": 0.97, "below": 0, "section": "<b>x</b>"},
            },
        }
    ],
    "suspect_rank": 2,
    "min_reports": 2,
}


def test_cycle_page_draws_one_cell_per_rank_and_marks_the_straggler(tmp_path: Path) -> None:
    repo = storage.open_repository(f"sqlite:///{tmp_path / 'relaunch.db'}")
    verdict = {"decision": "RESTART", "rule": "restart.cascade_only", "basis": "b"}
    repo.save_verdict("j", 0, {**verdict, "stragglers": SCORES})
    repo.save_verdict("j", 1, verdict)
    try:
        with DashboardServer(repo) as server:
            page = http_get(server.base_url + "/jobs/j/cycles/0")
            plain = http_get(server.base_url + "/jobs/j/cycles/1")
    finally:
        repo.close()
    assert page.status_code == 200
    html = page.text
    svg = html[html.index('<svg class="plot straggler-strip"') :]
    svg = svg[: svg.index("</svg>")]
    cells = re.findall(
        r'<rect class="cell (\w+)([^"]*)"[^>]*data-rank="(\d+)" data-score="([\d.]+)"', svg
    )
    assert [(r, lvl) for lvl, _, r, _ in cells] == [
        ("0", "ok"),
        ("1", "warn"),
        ("2", "slow"),
        ("3", "ok"),
    ]
    assert "named" in cells[2][1] and "suspect" in cells[2][1]
    assert "named" not in cells[0][1]
    assert 'id="straggler-ranks">2<' in html and 'id="straggler-suspect">2<' in html
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html  # escaped
    assert plain.status_code == 200 and 'id="stragglers"' not in plain.text
