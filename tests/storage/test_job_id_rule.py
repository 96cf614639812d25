"""One job-id rule (storage.job_id) everywhere: a name such as `exp 1` is refused with the
same message by `relaunch analyze`, `relaunch run`, the repository and the HTTP API, so
nothing is stored that `/v1` cannot reach; a valid id with URL-reserved characters is
stored and reachable.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from relaunch import storage
from relaunch.storage import job_id as job_id_rule
from tests._launcher_helpers import run_relaunch
from tests._service_helpers import REPO_ROOT, cli_env, require_restart_agent

RULE = "must be letters, digits and ._:@+=-, starting with a letter or digit"
LOG = "[rank0]: iteration 10/100 | lm loss 3.21\n[rank1]: SyntaxError: invalid syntax (m.py, line 1)\n"


@pytest.mark.parametrize("good", ["j", "exp-1", "team:a+run=1@x", "A" * 255, "0.5_b"])
def test_valid_ids(good: str) -> None:
    assert job_id_rule.check(good) == good and job_id_rule.problem(good) is None


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("exp 1", f"job_id 'exp 1': {RULE}"),
        ("a/b", f"job_id 'a/b': {RULE}"),
        ("..", f"job_id '..': {RULE}"),
        ("-x", f"job_id '-x': {RULE}"),
        ("x\x1b[2J", f"job_id 'x\\x1b[2J': {RULE}"),
        ("", "job_id must be a non-empty string, got ''"),
        (None, "job_id must be a non-empty string, got None"),
        ("a" * 256, "job_id is longer than 255 characters"),
    ],
)
def test_invalid_ids_get_one_line(bad: object, message: str) -> None:
    with pytest.raises(job_id_rule.InvalidJobId) as exc:
        job_id_rule.check(bad)
    assert str(exc.value) == message and "\n" not in message


def test_repository_refuses_to_store_an_unreachable_id(tmp_path: Path) -> None:
    repo = storage.open_repository(f"sqlite:///{tmp_path / 'r.db'}")
    with pytest.raises(ValueError, match=re.escape(f"job_id 'exp 1': {RULE}")):
        repo.register_cycle("exp 1", 0, "/logs/c0.log")
    with pytest.raises(ValueError, match="job_id 'exp 1'"):
        repo.allocate_cycle("exp 1")
    assert repo.list_jobs() == []  # nothing was stored


def test_relaunch_analyze_refuses_the_id(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_text(LOG)
    db = f"sqlite:///{tmp_path / 'a.db'}"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "relaunch.cli",
            "analyze",
            str(log),
            "--db",
            db,
            "--job-id",
            "exp 1",
        ],
        cwd=REPO_ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [f"relaunch analyze: error: --job-id 'exp 1': {RULE}"]
    assert not (tmp_path / "a.db").exists()  # refused before the database was opened


def test_relaunch_run_refuses_the_id(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("print('never run')\n")
    r = run_relaunch(tmp_path, ["--job-id", "exp 1", "x.py"], timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"relaunch run: error: --job-id 'exp 1': {RULE}"]
    assert not (tmp_path / "relaunch-logs").exists()


def test_http_api_refuses_the_id_and_reaches_a_valid_odd_one(service_factory) -> None:
    require_restart_agent()
    svc = service_factory()
    log = svc.root / "exp" / "cycle_0.log"
    log.parent.mkdir(parents=True)
    log.write_text(LOG)
    with svc.client() as c:
        r = c.post("/logs", json={"log_path": str(log), "job_id": "exp 1", "cycle_id": 0})
        assert r.status_code == 400
        assert r.json()["error_code"] == "invalid_parameter"
        assert r.json()["message"] == f"job_id 'exp 1': {RULE}"
        for url in ("/v1/jobs/exp%201", "/v1/jobs/exp%201/cycles/0/verdict"):
            r = c.get(url)
            assert r.status_code == 400 and r.json()["message"] == f"job_id 'exp 1': {RULE}"
        r = c.post("/v1/jobs/exp%201/cycles/0/log", content=LOG.encode())
        assert r.status_code == 400 and r.json()["error_code"] == "invalid_parameter"
        assert c.get("/v1/jobs").json()["jobs"] == []
        odd = "team:a+run=1@x"
        r = c.post(
            "/logs",
            json={
                "log_path": str(log),
                "job_id": odd,
                "cycle_id": 0,
                "analysis_intent": "terminal",
            },
        )
        assert r.status_code == 200, r.text
        r = c.get("/v1/jobs/team%3Aa%2Brun%3D1%40x/cycles/0/verdict", params={"wait": "true"})
        assert r.status_code == 200, r.text
        assert [j["job_id"] for j in c.get("/v1/jobs").json()["jobs"]] == [odd]
