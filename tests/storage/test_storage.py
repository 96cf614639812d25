"""Storage: schema, migrations, upsert (replace, never duplicate), per-job bound, bad input.

Runs against a real SQLite file, and against PostgreSQL when RELAUNCH_TEST_PG_URL is set.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import func, inspect, select

from relaunch import storage
from relaunch.storage import StorageError, open_repository
from relaunch.storage.models import Cycle, EvidenceRow, Job
from tests._storage_helpers import sqlite_url, verdict


@pytest.fixture
def repo(db_url: str):
    r = open_repository(db_url)
    yield r
    r.close()


def _count(repo, model) -> int:
    with repo.read_session() as s:
        return s.scalar(select(func.count()).select_from(model))


def test_default_url_is_under_relaunch_home_in_wal_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAUNCH_HOME", str(tmp_path / "home"))
    assert storage.default_url() == f"sqlite:///{tmp_path / 'home' / 'relaunch.db'}"
    repo = open_repository()
    repo.save_verdict("j", 0, verdict())
    repo.close()
    db = tmp_path / "home" / "relaunch.db"
    assert db.is_file()
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT count(*) FROM cycles").fetchone()[0] == 1
    con.close()


def test_relaunch_home_defaults_to_dot_relaunch(monkeypatch):
    monkeypatch.delenv("RELAUNCH_HOME", raising=False)
    assert storage.relaunch_home() == Path.home() / ".relaunch"


def test_save_then_read_back_everything(repo):
    repo.register_cycle("job-a", 0, "/logs/cycle_0.log", node="node7")
    v = verdict("STOP", rule="workload_recurrence", last_iteration=120)
    rec = repo.save_verdict(
        "job-a", 0, v, log_identity={"path": "/logs/cycle_0.log", "size": 4096, "sha256": "ab" * 32}
    )
    assert rec.decision == "STOP" and rec.status == "analysed"
    got = repo.get_cycle("job-a", 0)
    assert got is not None
    assert got.verdict == v
    assert (got.node, got.log_path, got.log_size, got.log_sha256) == (
        "node7",
        "/logs/cycle_0.log",
        4096,
        "ab" * 32,
    )
    assert (got.rule, got.fingerprint, got.failure_class, got.domain, got.last_iteration) == (
        "workload_recurrence",
        "cuda_oom:CUDA out of memory",
        "cuda_oom",
        "workload",
        120,
    )
    assert got.started_at is not None and got.analysed_at is not None
    assert got.started_at.tzinfo is not None
    # primary first, then the supporting lines (the primary's own line is not repeated)
    assert [(e["line"], e["primary"]) for e in got.evidence] == [(10, True), (12, False)]
    d = got.to_dict()
    assert isinstance(d["analysed_at"], str) and d["verdict"]["decision"] == "STOP"


def test_resaving_a_cycle_replaces_it_and_its_evidence(repo):
    repo.save_verdict("j", 3, verdict("RESTART", evidence_lines=(10, 11, 12, 13)))
    repo.save_verdict("j", 3, verdict("STOP", rule="second", evidence_lines=(10, 20)))
    assert _count(repo, Cycle) == 1
    assert _count(repo, Job) == 1
    assert _count(repo, EvidenceRow) == 2
    got = repo.get_cycle("j", 3)
    assert got.decision == "STOP" and got.rule == "second"
    assert [e["line"] for e in got.evidence] == [10, 20]


def test_register_after_verdict_keeps_verdict_and_verdict_keeps_registration(repo):
    repo.register_cycle("j", 1, "/l/1.log", node="n1")
    repo.save_verdict("j", 1, verdict())
    repo.register_cycle("j", 1, "/l/1.log")
    got = repo.get_cycle("j", 1)
    assert got.decision == "RESTART" and got.node == "n1" and got.log_path == "/l/1.log"
    assert _count(repo, Cycle) == 1


def test_prior_verdicts_only_earlier_cycles_oldest_first(repo):
    for c in (4, 0, 2, 1):
        repo.save_verdict("j", c, verdict(rule=f"r{c}"))
    repo.register_cycle("j", 3, "/l/3.log")  # registered, not analysed: no verdict
    repo.save_verdict("other", 0, verdict(rule="other"))
    prior = repo.prior_verdicts("j", 4)
    assert [c for c, _ in prior] == [0, 1, 2]
    assert [v["rule"] for _, v in prior] == ["r0", "r1", "r2"]
    assert [c for c, _ in repo.prior_verdicts("j", 4, limit=2)] == [1, 2]
    assert repo.prior_verdicts("j", 0) == []
    assert repo.prior_verdicts("nobody", 10) == []


def test_history_is_bounded_per_job_oldest_pruned(db_url):
    repo = open_repository(db_url, max_cycles_per_job=3)
    for c in range(6):
        repo.save_verdict("j", c, verdict(evidence_lines=(10, 11)))
    repo.save_verdict("k", 0, verdict())
    assert [c.cycle for c in repo.list_cycles("j")] == [3, 4, 5]
    assert [c.cycle for c in repo.list_cycles("k")] == [0]
    # evidence rows of pruned cycles are gone too: 4 cycles x 2 rows
    assert _count(repo, EvidenceRow) == 8
    # re-saving a kept cycle does not prune anything
    repo.save_verdict("j", 3, verdict())
    assert [c.cycle for c in repo.list_cycles("j")] == [3, 4, 5]
    repo.close()


def test_list_jobs_search_next_cycle(repo):
    repo.save_verdict("a", 0, verdict(fingerprint="fp1", failure_class="nccl_error"))
    repo.save_verdict("a", 1, verdict("STOP", fingerprint="fp2", failure_class="cuda_oom"))
    repo.save_verdict("b", 0, verdict(fingerprint="fp1", failure_class="nccl_error"))
    repo.register_cycle("c", 0, "/x.log")
    jobs = {j.job_id: j for j in repo.list_jobs()}
    assert set(jobs) == {"a", "b", "c"}
    assert (jobs["a"].cycles, jobs["a"].last_cycle, jobs["a"].last_decision) == (2, 1, "STOP")
    assert (jobs["c"].cycles, jobs["c"].last_decision) == (1, None)
    assert repo.get_job("a").last_failure_class == "cuda_oom"
    assert repo.get_job("zzz") is None
    assert {(r.job_id, r.cycle) for r in repo.search(fingerprint="fp1")} == {("a", 0), ("b", 0)}
    assert [(r.job_id, r.cycle) for r in repo.search(failure_class="cuda_oom")] == [("a", 1)]
    assert repo.search(fingerprint="fp1", failure_class="cuda_oom") == []
    assert len(repo.search(limit=1)) == 1
    assert repo.next_cycle("a") == 2 and repo.next_cycle("new") == 0
    assert repo.next_cycle("new", first=1) == 1


def test_fr_llm_audit_state_attach_without_touching_the_verdict(repo):
    v = verdict()
    repo.save_verdict("j", 0, v)
    repo.save_fr_findings("j", 0, {"culprit_ranks": [5], "groups": []})
    repo.save_llm("j", 0, {"contributed": True, "model": "m"})
    repo.set_audit_path("j", 0, "/audit/j/0.json")
    repo.set_job_state("j", "stopped")
    got = repo.get_cycle("j", 0)
    assert got.verdict == v and got.decision == "RESTART"
    assert got.fr_findings == {"culprit_ranks": [5], "groups": []}
    assert got.llm == {"contributed": True, "model": "m"} and got.llm_contributed is True
    assert got.audit_path == "/audit/j/0.json"
    assert repo.get_job("j").state == "stopped"
    # re-analysis replaces the verdict but keeps FR findings attached to the cycle
    repo.save_verdict("j", 0, verdict("STOP"))
    assert repo.get_cycle("j", 0).fr_findings == {"culprit_ranks": [5], "groups": []}


def test_node_health_records_merge_by_node_and_survive_reanalysis(repo):
    sick = {"node": "node1", "healthy": False, "reason": "ib down", "checks": []}
    repo.save_node_health("j", 2, sick)  # before the cycle is known: the cycle is created
    assert repo.get_cycle("j", 2).node_health == {"node1": sick}
    repo.save_verdict("j", 2, verdict())
    other = {"node": 0, "healthy": True, "reason": "ok"}
    repo.save_node_health("j", 2, other)
    again = dict(sick, reason="ib still down")
    repo.save_node_health("j", 2, again)  # the same node again: replaced, not duplicated
    got = repo.get_cycle("j", 2)
    assert got.node_health == {"node1": again, "0": other}
    assert got.verdict == verdict()


def test_sent_alerts_are_recorded_once_per_job_and_key_across_reopening(db_url):
    r1 = open_repository(db_url)
    r1.save_verdict("j", 3, verdict("STOP"))
    assert r1.alert_recorded("j", "slack:cycle:3:STOP") is False
    assert r1.alert_recorded("nojob", "slack:cycle:3:STOP") is False
    assert r1.record_alert("j", "slack:cycle:3:STOP") is True
    assert r1.record_alert("j", "slack:cycle:3:STOP") is False
    assert r1.record_alert("other", "slack:cycle:3:STOP") is True  # per job
    r1.close()
    r2 = open_repository(db_url)  # a restarted service
    assert r2.alert_recorded("j", "slack:cycle:3:STOP") is True
    assert r2.alert_recorded("j", "slack:recurring:fp") is False
    for bad in ("", "x" * 513, None):
        with pytest.raises(ValueError, match="alert key"):
            r2.record_alert("j", bad)
        with pytest.raises(ValueError, match="alert key"):
            r2.alert_recorded("j", bad)
    r2.close()


def test_history_survives_reopening(db_url):
    r1 = open_repository(db_url)
    r1.save_verdict("j", 0, verdict(rule="persisted"))
    r1.close()
    r2 = open_repository(db_url)
    assert r2.get_cycle("j", 0).rule == "persisted"
    r2.close()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: r.save_verdict("", 0, verdict()), "job_id must be a non-empty string"),
        (lambda r: r.save_verdict(None, 0, verdict()), "job_id must be a non-empty string"),
        (lambda r: r.save_verdict("x" * 256, 0, verdict()), "longer than 255"),
        (lambda r: r.save_verdict("j", -1, verdict()), "non-negative integer"),
        (lambda r: r.save_verdict("j", True, verdict()), "non-negative integer"),
        (lambda r: r.save_verdict("j", "1", verdict()), "non-negative integer"),
        (lambda r: r.save_verdict("j", 0, "STOP"), "verdict must be a dict"),
        (lambda r: r.save_verdict("j", 0, {"decision": "MAYBE"}), "STOP or RESTART"),
        (lambda r: r.save_verdict("j", 0, {"decision": "STOP", "x": math.nan}), "JSON"),
        (lambda r: r.save_verdict("j", 0, {"decision": "STOP", "x": object()}), "JSON"),
        (lambda r: r.save_fr_findings("j", 0, [1, 2]), "findings must be a dict"),
        (lambda r: r.save_node_health("j", 0, ["node1"]), "record must be a dict"),
        (lambda r: r.save_node_health("j", 0, {"healthy": False}), "needs a 'node' name"),
        (lambda r: r.save_node_health("j", 0, {"node": "n", "x": math.inf}), "JSON"),
        (lambda r: r.set_job_state("j", "exploded"), "job state must be one of"),
        (lambda r: r.search(limit=0), "limit must be"),
        (lambda r: r.prior_verdicts("j", -2), "non-negative integer"),
    ],
)
def test_bad_input_is_rejected_and_loses_nothing(repo, call, message):
    repo.save_verdict("j", 0, verdict(rule="kept"))
    with pytest.raises(ValueError, match=message):
        call(repo)
    assert repo.get_cycle("j", 0).rule == "kept"
    assert _count(repo, Cycle) == 1


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "not a database URL"),
        ("", "empty database URL"),
        ("nosuchdb://host/x", "unsupported database URL scheme"),
    ],
)
def test_bad_urls_get_a_clear_error(url, message):
    with pytest.raises(StorageError, match=message):
        open_repository(url)


def test_database_path_that_is_a_directory(tmp_path):
    with pytest.raises(StorageError, match="is a directory"):
        open_repository(f"sqlite:///{tmp_path}")


def test_not_a_database_file(tmp_path):
    bad = tmp_path / "garbage.db"
    bad.write_bytes(b"this is not sqlite\x00" * 100)
    with pytest.raises(StorageError, match="cannot open database"):
        open_repository(f"sqlite:///{bad}")
    assert bad.read_bytes() == b"this is not sqlite\x00" * 100  # left as it was


def test_in_memory_sqlite_works():
    repo = open_repository("sqlite://")
    repo.save_verdict("j", 0, verdict())
    assert repo.get_cycle("j", 0).decision == "RESTART"


def test_history_query_indexes_exist(repo):
    insp = inspect(repo.engine)
    idx = {tuple(i["column_names"]) for i in insp.get_indexes("cycles")}
    assert ("fingerprint", "analysed_at") in idx and ("failure_class", "analysed_at") in idx
    uniques = {tuple(u["column_names"]) for u in insp.get_unique_constraints("cycles")}
    assert ("job_pk", "cycle") in uniques


def test_search_and_history_queries_use_the_indexes(tmp_path):
    repo = open_repository(sqlite_url(tmp_path))
    repo.save_verdict("j", 0, verdict())
    repo.close()
    con = sqlite3.connect(tmp_path / "relaunch.db")
    con.execute("ANALYZE")

    def plan(sql: str) -> str:
        return " ".join(r[-1] for r in con.execute("EXPLAIN QUERY PLAN " + sql))

    assert "ix_cycles_fingerprint_analysed_at" in plan(
        "SELECT * FROM cycles WHERE fingerprint = 'x' ORDER BY analysed_at DESC LIMIT 100"
    )
    assert "ix_cycles_failure_class_analysed_at" in plan(
        "SELECT * FROM cycles WHERE failure_class = 'x' ORDER BY analysed_at DESC LIMIT 100"
    )
    assert "INDEX sqlite_autoindex_cycles_1 (job_pk=? AND cycle<?)" in plan(
        "SELECT * FROM cycles WHERE job_pk = 1 AND cycle < 10 ORDER BY cycle DESC"
    )
    con.close()


def test_bound_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAUNCH_MAX_CYCLES_PER_JOB", "2")
    repo = open_repository(sqlite_url(tmp_path))
    assert repo.max_cycles_per_job == 2
    for c in range(4):
        repo.save_verdict("j", c, verdict())
    assert [c.cycle for c in repo.list_cycles("j")] == [2, 3]
    repo.close()
    # an explicit argument wins over the environment
    assert open_repository(sqlite_url(tmp_path), max_cycles_per_job=5).max_cycles_per_job == 5


@pytest.mark.parametrize("raw", ["0", "-3", "lots"])
def test_bad_bound_from_environment(tmp_path, monkeypatch, raw):
    monkeypatch.setenv("RELAUNCH_MAX_CYCLES_PER_JOB", raw)
    with pytest.raises(StorageError, match="RELAUNCH_MAX_CYCLES_PER_JOB must be a positive"):
        open_repository(sqlite_url(tmp_path))


def test_bad_bound_argument(tmp_path):
    with pytest.raises(ValueError, match="at least 1"):
        open_repository(sqlite_url(tmp_path), max_cycles_per_job=0)


def test_recount_after_a_bulk_insert_restores_counts_and_bound(db_url):
    from sqlalchemy import insert

    repo = open_repository(db_url, max_cycles_per_job=5)
    repo.save_verdict("bulk", 0, verdict())
    with repo.write_session() as s:  # a writer that bypasses save_verdict (imports, benchmarks)
        job_pk = s.scalar(select(Job.id).where(Job.job_id == "bulk"))
        s.execute(
            insert(Cycle),
            [{"job_pk": job_pk, "cycle": c, "status": "analysed"} for c in range(1, 9)],
        )
    assert repo.get_job("bulk").cycles == 1  # stale until recounted
    rec = repo.recount_job("bulk")
    assert (rec.cycles, rec.last_cycle) == (5, 8)
    assert [c.cycle for c in repo.list_cycles("bulk")] == [4, 5, 6, 7, 8]
    assert repo.recount_job("nobody") is None
    repo.close()


def test_list_cycles_without_json_and_with_a_limit(repo):
    for c in range(5):
        repo.save_verdict("j", c, verdict(rule=f"r{c}"))
    light = repo.list_cycles("j", with_verdict=False)
    assert [(c.cycle, c.rule, c.verdict) for c in light] == [(i, f"r{i}", None) for i in range(5)]
    assert [c.cycle for c in repo.list_cycles("j", limit=2)] == [3, 4]
    assert repo.list_cycles("j", limit=2)[1].verdict["rule"] == "r4"


def test_a_verdict_on_the_latest_cycle_sets_the_job_state(db_url):
    repo = open_repository(db_url)
    repo.save_verdict("s", 0, verdict("RESTART"))
    assert repo.get_job("s").state == "running"
    repo.save_verdict("s", 1, verdict("STOP", rule="workload_certain"))
    assert repo.get_job("s").state == "stopped"
    # re-deciding an older cycle (e.g. after an FR upload) says nothing about the job now
    repo.save_verdict("s", 0, verdict("RESTART"))
    assert repo.get_job("s").state == "stopped"
    # a new cycle after a STOP (the user restarted the job) that gets RESTART: running again
    repo.save_verdict("s", 2, verdict("RESTART"))
    assert repo.get_job("s").state == "running"
    repo.close()


def test_the_launchers_final_state_is_never_overwritten_by_a_verdict(db_url):
    repo = open_repository(db_url)
    repo.save_verdict("f", 0, verdict("RESTART"))
    repo.set_job_state("f", "failed")
    repo.save_verdict("f", 0, verdict("STOP", rule="workload_certain"))  # late LLM re-save
    assert repo.get_job("f").state == "failed"
    repo.set_job_state("f", "stopped")
    repo.save_verdict("f", 1, verdict("RESTART"))
    assert repo.get_job("f").state == "running"
    repo.close()


def test_bulk_insert_cycles_recounts_the_job_and_applies_the_bound(db_url):
    from relaunch.storage.service_queries import bulk_insert_cycles

    repo = open_repository(db_url, max_cycles_per_job=5)
    rows = ({"cycle": c, "decision": "RESTART", "log_path": f"/l/{c}.log"} for c in range(8))
    assert bulk_insert_cycles(repo, "bulk2", rows) == 8
    job = repo.get_job("bulk2")
    assert (job.cycles, job.last_cycle) == (5, 7)
    assert [c.cycle for c in repo.list_cycles("bulk2")] == [3, 4, 5, 6, 7]
    with pytest.raises(ValueError, match="unknown cycle columns"):
        bulk_insert_cycles(repo, "bulk2", [{"cycle": 9, "no_such_column": 1}])
    assert repo.get_job("bulk2").cycles == 5  # the bad batch stored nothing
    repo.close()


def test_end_cycle_and_end_job_record_how_a_job_ended(db_url):
    """A succeeded job is not left `running` with its last cycle `registered`."""
    repo = open_repository(db_url)
    repo.register_cycle("e", 0, "/l/0.log")
    assert repo.get_cycle("e", 0).status == "registered"
    repo.end_cycle("e", 0, "succeeded", reason="all ranks exited with code 0")
    rec = repo.get_cycle("e", 0)
    assert (rec.status, rec.outcome, rec.end_reason) == (
        "ended",
        "succeeded",
        "all ranks exited with code 0",
    )
    assert rec.ended_at is not None
    repo.end_job("e", "succeeded", 0, reason="1 cycle")
    job = repo.get_job("e")
    assert (job.state, job.exit_code, job.end_reason) == ("succeeded", 0, "1 cycle")
    assert job.ended_at is not None and job.to_dict()["exit_code"] == 0
    # an analysed cycle keeps its status and verdict when its end is recorded after it
    repo.save_verdict("e", 1, verdict("RESTART"))
    repo.end_cycle("e", 1, "failed", reason="rank 1 exited with code 7")
    rec = repo.get_cycle("e", 1)
    assert (rec.status, rec.outcome, rec.decision) == ("analysed", "failed", "RESTART")
    assert [c.outcome for c in repo.list_cycles("e", with_verdict=False)] == [
        "succeeded",
        "failed",
    ]
    repo.close()


def test_an_ended_job_started_again_runs_and_keeps_its_history(db_url):
    repo = open_repository(db_url)
    repo.register_cycle("again", 0, "/l/0.log")
    repo.end_cycle("again", 0, "failed")
    repo.end_job("again", "interrupted", 130, reason="SIGINT")
    repo.save_verdict("again", 0, verdict("STOP", rule="late"))  # a late verdict: kept final
    assert repo.get_job("again").state == "interrupted"
    repo.register_cycle("again", 0, "/l/0.log")  # re-registering an old cycle changes nothing
    assert repo.get_job("again").state == "interrupted"
    repo.register_cycle("again", 1, "/l/1.log")  # the same job id continues with cycle 1
    job = repo.get_job("again")
    assert (job.state, job.exit_code, job.ended_at, job.cycles) == ("running", None, None, 2)
    repo.close()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda r: r.end_cycle("j", 0, "exploded"), "cycle outcome must be one of"),
        (lambda r: r.end_cycle("j", -1, "failed"), "cycle must be a non-negative integer"),
        (lambda r: r.end_job("j", "running", 0), "final job state must be one of"),
        (lambda r: r.end_job("j", "failed", "1"), "exit_code must be an integer"),
        (lambda r: r.end_job("j", "failed", True), "exit_code must be an integer"),
        (lambda r: r.end_job("", "failed", 1), "job_id must be a non-empty string"),
    ],
)
def test_bad_end_arguments_write_nothing(db_url, call, message):
    repo = open_repository(db_url)
    with pytest.raises(ValueError, match=message):
        call(repo)
    assert repo.list_jobs() == []
    repo.close()
