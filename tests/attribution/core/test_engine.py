"""AttributionEngine: scan + identity in one pass, history from a real SQLite file, save,
listeners that can neither change nor delay the verdict."""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path

import pytest

from relaunch.attribution.core.engine import AttributionEngine, VerdictEvent, scan_with_identity
from relaunch.restart_agent import scan_file
from relaunch.restart_agent.model import Decision, PolicyConfig, Rule, Verdict
from tests._storage_helpers import infra_log, syntax_log, workload_log


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def test_verdict_is_saved_with_the_logs_identity(repo, tmp_path):
    log = _write(tmp_path, "cycle_0.log", infra_log())
    engine = AttributionEngine(repo)
    v = engine.analyze_cycle("job", 0, log).to_dict()
    rec = repo.get_cycle("job", 0)
    assert rec.verdict == v
    data = log.read_bytes()
    assert rec.log_identity == {
        "path": str(log),
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert rec.decision == v["decision"] == "RESTART"
    assert rec.failure_class == v["primary"]["failure_class"] == "nccl_error"
    assert rec.last_iteration == 100
    assert rec.evidence[0]["primary"] and rec.evidence[0]["line"] == v["primary"]["line"]
    engine.close()


def test_analyze_cycle_returns_a_typed_verdict_whose_json_is_what_was_saved(repo, tmp_path):
    """The engine hands back a `Verdict` (enums, not strings); its `to_dict()` is exactly the
    stored JSON, byte for byte, and the enums serialise as their plain values."""
    import json

    engine = AttributionEngine(repo)
    v = engine.analyze_cycle("job", 0, _write(tmp_path, "s.log", syntax_log()))
    assert isinstance(v, Verdict)
    assert v.decision is Decision.STOP and isinstance(v.rule, Rule)
    d = v.to_dict()
    assert type(d["decision"]) is str and type(d["rule"]) is str
    stored = repo.get_cycle("job", 0).verdict
    assert json.dumps(d, sort_keys=True) == json.dumps(stored, sort_keys=True)
    assert (
        json.dumps(Decision.STOP) == '"STOP"' and f"{Rule.RESTART_PROGRESS}" == "restart.progress"
    )
    engine.close()


def test_verdict_from_dict_round_trips_the_saved_json(repo, tmp_path):
    """`Verdict.from_dict` reads back what `to_dict` wrote (node health included); an
    unknown decision or rule id is a ValueError, not a silently wrong enum."""
    engine = AttributionEngine(repo)
    log = _write(tmp_path, "i.log", infra_log())
    engine.analyze_cycle("j", 0, log)
    engine.store_node_health("j", 0, SICK_NODE)
    stored = engine.analyze_cycle("j", 0, log).to_dict()
    assert stored["node_health"]
    again = Verdict.from_dict(stored)
    assert again.to_dict() == stored and again.decision is Decision.RESTART
    for key, bad in (("decision", "MAYBE"), ("rule", "restart.whenever")):
        with pytest.raises(ValueError):
            Verdict.from_dict({**stored, key: bad})
    engine.close()


def test_one_pass_scan_equals_scan_file_for_any_chunking(tmp_path):
    text = infra_log(ranks=8) + "\r\nbinary \xff\xfe tail without newline"
    log = _write(tmp_path, "x.log", text.encode("utf-8", "surrogateescape"))
    expected = scan_file(log)
    for chunk in (1, 7, 4096, 1 << 20):
        evidence, ident = scan_with_identity(log, chunk_size=chunk)
        assert evidence == expected
        assert ident.size == log.stat().st_size
    _, ident = scan_with_identity(log, hash_log=False)
    assert ident.sha256 is None


def test_history_comes_from_earlier_cycles_only(repo, tmp_path):
    engine = AttributionEngine(repo)
    log = _write(tmp_path, "c.log", infra_log(last_iteration=100))
    first = engine.analyze_cycle("job", 0, log).to_dict()
    second = engine.analyze_cycle("job", 1, log).to_dict()
    assert first["history"]["same_root_prior_cycles"] == 0
    assert second["history"]["same_root_prior_cycles"] == 1
    # re-analysing cycle 1 replaces it and still sees only cycle 0
    again = engine.analyze_cycle("job", 1, log).to_dict()
    assert again["history"]["same_root_prior_cycles"] == 1
    assert [c.cycle for c in repo.list_cycles("job")] == [0, 1]
    # another job's history is its own
    assert engine.analyze_cycle("other", 5, log).to_dict()["history"]["same_root_prior_cycles"] == 0
    engine.close()


def test_infrastructure_ceiling_and_progress_reset(repo, tmp_path):
    policy = PolicyConfig(same_root_no_progress_retries=2)
    engine = AttributionEngine(repo, policy)
    stuck = _write(tmp_path, "stuck.log", infra_log(last_iteration=100))
    decisions = [engine.analyze_cycle("j", c, stuck).to_dict()["decision"] for c in range(3)]
    assert decisions == ["RESTART", "RESTART", "STOP"]
    # progress between cycles protects the restart
    engine2 = AttributionEngine(repo, policy)
    out = []
    for c in range(4):
        log = _write(tmp_path, f"p{c}.log", infra_log(last_iteration=100 + 50 * c))
        out.append(engine2.analyze_cycle("moving", c, log).to_dict()["decision"])
    assert out == ["RESTART"] * 4
    engine.close()
    engine2.close()


def test_without_a_repository_nothing_is_saved_and_history_is_empty(tmp_path):
    engine = AttributionEngine(None)
    log = _write(tmp_path, "w.log", workload_log())
    calls: list[VerdictEvent] = []
    engine.add_listener(calls.append)
    for _ in range(3):
        v = engine.analyze_cycle("job", 1, log).to_dict()
        assert v["decision"] == "RESTART"
        assert v["history"]["same_root_prior_cycles"] == 0
    engine.drain(5)
    assert calls == []  # nothing was saved, so nothing is published
    assert engine.register_cycle("job", 1, str(log)) is None


def test_listeners_get_the_saved_verdict_and_cannot_change_it(repo, tmp_path, caplog):
    engine = AttributionEngine(repo, audit_dir=tmp_path / "audit")
    seen: list[tuple[VerdictEvent, bool]] = []

    def broken(event: VerdictEvent) -> None:
        event.verdict.decision = "HACKED"  # type: ignore[assignment]
        raise RuntimeError("listener exploded")

    def recorder(event: VerdictEvent) -> None:
        stored = repo.get_cycle(event.job_id, event.cycle)
        seen.append((event, stored is not None and stored.verdict == event.verdict.to_dict()))

    engine.add_listener(broken)
    engine.add_listener(recorder)
    log = _write(tmp_path, "s.log", syntax_log())
    with caplog.at_level(logging.ERROR, logger="relaunch.attribution.core.engine"):
        v = engine.analyze_cycle("job", 0, log).to_dict()
        assert engine.drain(10)
    assert v["decision"] == "STOP"
    assert repo.get_cycle("job", 0).decision == "STOP"
    assert len(seen) == 1
    event, was_saved_first = seen[0]
    assert was_saved_first  # the listener ran after the save, and saw the original verdict
    assert event.verdict.decision is Decision.STOP
    assert (event.job_id, event.cycle, event.log_path) == ("job", 0, str(log))
    assert event.log_identity["sha256"] == hashlib.sha256(log.read_bytes()).hexdigest()
    assert event.audit_dir == str(tmp_path / "audit")
    assert event.inputs is not None
    assert event.inputs.prior_cycles == () and event.inputs.fr_culprit_ranks is None
    assert "listener exploded" in caplog.text
    engine.close()


def test_a_blocked_listener_does_not_delay_the_verdict(repo, tmp_path):
    engine = AttributionEngine(repo)
    release = threading.Event()
    entered = threading.Event()

    def slow(event: VerdictEvent) -> None:
        entered.set()
        release.wait(30)

    engine.add_listener(slow)
    log = _write(tmp_path, "i.log", infra_log())
    v1 = engine.analyze_cycle("job", 0, log).to_dict()
    assert entered.wait(10)
    v2 = engine.analyze_cycle(
        "job", 1, log
    ).to_dict()  # returns while the listener is still blocked
    assert not release.is_set()
    assert (v1["decision"], v2["decision"]) == ("RESTART", "RESTART")
    assert not engine.drain(0.05)
    release.set()
    assert engine.drain(10)
    engine.close()


def test_stored_flight_recorder_ranks_are_used(repo, tmp_path):
    engine = AttributionEngine(repo)
    events: list[VerdictEvent] = []
    engine.add_listener(events.append)
    repo.save_fr_findings("job", 0, {"culprit_ranks": [2]})
    engine.analyze_cycle("job", 0, _write(tmp_path, "i.log", infra_log()))
    engine.drain(10)
    assert events[0].inputs is not None and events[0].inputs.fr_culprit_ranks == (2,)
    assert repo.get_cycle("job", 0).fr_findings == {"culprit_ranks": [2]}
    engine.close()


def test_precomputed_evidence_skips_the_scan(repo, tmp_path):
    log = _write(tmp_path, "i.log", infra_log())
    evidence = scan_file(log)
    engine = AttributionEngine(repo)
    v = engine.analyze_cycle(
        "job", 0, log, evidence=evidence, log_identity={"sha256": "f" * 64}
    ).to_dict()
    assert v == AttributionEngine(None).analyze_cycle(None, None, log).to_dict()
    assert repo.get_cycle("job", 0).log_identity == {
        "path": str(log),
        "size": log.stat().st_size,
        "sha256": "f" * 64,
    }


def test_register_cycle_then_analyse(repo, tmp_path):
    engine = AttributionEngine(repo)
    log = _write(tmp_path, "cycle_3.log", infra_log())
    rec = engine.register_cycle("job", 3, str(log), node=1)
    assert rec.status == "registered" and rec.node == "1"
    engine.analyze_cycle("job", 3, log)
    got = repo.get_cycle("job", 3)
    assert got.status == "analysed" and got.node == "1" and got.started_at is not None


def test_bad_paths_raise_for_the_caller(repo, tmp_path):
    engine = AttributionEngine(repo)
    with pytest.raises(FileNotFoundError):
        engine.analyze_cycle("job", 0, tmp_path / "missing.log")
    with pytest.raises(IsADirectoryError):
        engine.analyze_cycle("job", 0, tmp_path)
    assert repo.list_jobs() == []  # nothing half-written


def test_one_engine_shared_by_threads(repo, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    engine = AttributionEngine(repo)
    events: list[VerdictEvent] = []
    engine.add_listener(events.append)
    log = _write(tmp_path, "i.log", infra_log())
    jobs = [("same", 0)] * 4 + [(f"job{k}", k) for k in range(8)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda jc: engine.analyze_cycle(jc[0], jc[1], log).to_dict(), jobs))
    assert all(r["decision"] == "RESTART" for r in results)
    assert engine.drain(10)
    assert len(events) == len(jobs)
    assert [c.cycle for c in repo.list_cycles("same")] == [0]
    assert len(repo.list_jobs()) == 9
    engine.close()


def test_the_event_carries_the_policy_and_the_history_it_decided_with(repo, tmp_path):
    policy = PolicyConfig(same_root_no_progress_retries=7)
    engine = AttributionEngine(repo, policy=policy, history_limit=1)
    events: list[VerdictEvent] = []
    engine.add_listener(events.append)
    log = _write(tmp_path, "c.log", infra_log())
    for c in range(3):
        engine.analyze_cycle("job", c, log, extra={"source": "test"})
    assert engine.drain(10)
    last = events[-1]
    assert last.inputs is not None and last.inputs.policy is policy  # typed, not a dict
    assert [p.cycle for p in last.inputs.prior_cycles] == [1]
    assert last.extra == {"source": "test"} and last.inputs.fr_culprit_ranks is None
    engine.close()


def test_stop_sets_the_job_stopped_and_restart_running(repo, tmp_path):
    engine = AttributionEngine(repo)
    assert engine.analyze_cycle("st", 0, _write(tmp_path, "i.log", infra_log())).to_dict()[
        "decision"
    ] == ("RESTART")
    assert repo.get_job("st").state == "running"
    assert engine.analyze_cycle("st", 1, _write(tmp_path, "s.log", syntax_log())).to_dict()[
        "decision"
    ] == ("STOP")
    assert repo.get_job("st").state == "stopped"
    engine.close()


SICK_NODE = {
    "node": "node1",
    "host": "gpu-17",
    "healthy": False,
    "reason": "external_service: ib check failed",
    "ran_this_cycle": True,
    "excluded_from_cycle": 3,
    "checks": [{"name": "external_service", "status": "fail", "detail": "ib", "data": {}}],
}


def test_node_health_recorded_after_the_verdict_re_decides_the_cycle(repo, tmp_path):
    """The ceiling STOP of cycle 2 is decided again once node1's failed check arrives."""
    from relaunch.attribution.core.audit import AuditWriter, artifact_path, load_artifact, recheck

    engine = AttributionEngine(repo, PolicyConfig(same_root_no_progress_retries=2))
    engine.add_listener(AuditWriter(tmp_path / "audit", repo=repo))
    stuck = _write(tmp_path, "stuck.log", infra_log(last_iteration=100))
    verdicts = [engine.analyze_cycle("j", c, stuck) for c in range(3)]
    assert verdicts[2].rule is Rule.STOP_SAME_ROOT_CEILING
    again = engine.record_node_health("j", 2, SICK_NODE)
    assert again is not None
    assert (again.decision, again.rule) == (Decision.RESTART, Rule.RESTART_UNHEALTHY_NODE_EXCLUDED)
    assert [n.node for n in again.node_health] == ["node1"]
    rec = repo.get_cycle("j", 2)
    assert rec.rule == "restart.unhealthy_node_excluded"
    assert rec.node_health == {"node1": SICK_NODE}
    assert engine.record_node_health("j", 2, SICK_NODE) is None  # already listed: no re-decide
    engine.drain(10)
    art = artifact_path(tmp_path / "audit", "j", 2)
    doc = load_artifact(art)
    assert doc["inputs"]["node_health"][0]["reason"] == SICK_NODE["reason"]
    assert doc["rule"] == "restart.unhealthy_node_excluded"
    assert recheck(art).ok
    # a later report of the same node that says something else: decided again
    worse = dict(SICK_NODE, reason="external_service: ib and nvlink down")
    third = engine.record_node_health("j", 2, worse)
    assert third is not None and "ib and nvlink down" in third.basis
    engine.drain(10)
    # tampered node-health inputs are a format error, not a crash
    import json

    from relaunch.attribution.core.audit import AuditFormatError

    for bad in ([{"node": "x", "healthy": "no"}], [5], 5):
        doc = load_artifact(art)
        doc["inputs"]["node_health"] = bad
        tampered = tmp_path / "tampered.json"
        tampered.write_text(json.dumps(doc))
        with pytest.raises(AuditFormatError, match="bad recorded node_health"):
            recheck(tampered)
    engine.close()


def test_node_health_stored_before_the_analysis_is_in_the_first_verdict(repo, tmp_path):
    engine = AttributionEngine(repo)
    repo.save_node_health("j", 0, SICK_NODE)
    repo.save_node_health("j", 0, {"node": "broken"})  # unusable: logged and left out
    v = engine.analyze_cycle("j", 0, _write(tmp_path, "i.log", infra_log())).to_dict()
    assert [n["node"] for n in v["node_health"]] == ["node1"]
    assert "node1" in v["basis"]
    engine.close()


def test_bad_node_health_records_are_refused_and_lose_nothing(repo, tmp_path):
    engine = AttributionEngine(repo)
    v = engine.analyze_cycle("j", 0, _write(tmp_path, "i.log", infra_log())).to_dict()
    for bad, message in [({"healthy": False}, "'node'"), ({"node": "n"}, "'healthy'")]:
        with pytest.raises(ValueError, match=message):
            engine.record_node_health("j", 0, bad)
    rec = repo.get_cycle("j", 0)
    assert rec.verdict == v and rec.node_health is None
    with pytest.raises(RuntimeError, match="needs a history repository"):
        AttributionEngine(None).record_node_health("j", 0, SICK_NODE)
    engine.close()


def test_persist_false_is_a_dry_run_on_the_same_inputs(repo, tmp_path):
    """MCP's analyze_log(save=false) path: history and stored FR ranks are read, nothing
    is written, no listener runs, and the verdict equals the one a save would store."""
    engine = AttributionEngine(repo)
    events: list[VerdictEvent] = []
    engine.add_listener(events.append)
    log = _write(tmp_path, "c.log", infra_log(last_iteration=100))
    engine.analyze_cycle("job", 0, log)
    engine.store_fr_findings("job", 1, {"culprit_ranks": [3]})  # registers cycle 1
    assert engine.drain(10) and len(events) == 1
    dry = engine.analyze_cycle("job", 1, log, persist=False).to_dict()
    assert engine.drain(10) and len(events) == 1  # nothing published
    rec = repo.get_cycle("job", 1)
    assert rec.verdict is None and rec.log_path is None  # nothing saved
    assert dry["history"]["same_root_prior_cycles"] == 1
    saved = engine.analyze_cycle("job", 1, log).to_dict()
    assert engine.drain(10) and events[-1].inputs.fr_culprit_ranks == (3,)
    for key in ("decision", "rule", "basis", "history", "fr"):
        assert dry[key] == saved[key]
    with pytest.raises(ValueError, match="persist=True needs"):
        AttributionEngine(None).analyze_cycle("job", 2, log, persist=True)
    engine.close()
