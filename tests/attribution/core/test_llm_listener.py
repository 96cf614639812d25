"""The enrichment listener with the real engine, a real SQLite repository and the loopback LLM."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

try:
    from relaunch.attribution.core.engine import AttributionEngine, VerdictEvent
except ImportError as exc:  # the engine needs the restart agent's scanner (issue 2)
    pytest.skip(
        f"relaunch.attribution.core.engine is not importable yet: {exc}", allow_module_level=True
    )

from relaunch.attribution.core.audit import AuditWriter
from relaunch.attribution.core.enrichment import EnrichmentListener, audit_sidecar_path
from relaunch.restart_agent.llm.policy import RULE
from relaunch.restart_agent.model import Verdict
from relaunch.storage import HistoryRepository
from tests._llm_helpers import KEY, answer, config, make_verdict, write_log
from tests._llm_server import LLMServer

JOB = "job-llm"


def _event(
    repo: HistoryRepository, log: Path, verdict: dict[str, Any], cycle: int = 1
) -> VerdictEvent:
    """Save `verdict` like the engine does and build the event it would hand out."""
    repo.register_cycle(JOB, cycle, str(log))
    repo.save_verdict(JOB, cycle, verdict, log_identity={"path": str(log)})
    return VerdictEvent(
        job_id=JOB,
        cycle=cycle,
        log_path=str(log),
        verdict=Verdict.from_dict(verdict),
        log_identity={"path": str(log)},
    )


def test_verdict_is_saved_and_returned_before_the_enrichment(
    llm_server: LLMServer, key_file: Path, tmp_path: Path, repo: HistoryRepository
) -> None:
    log, line = write_log(tmp_path)
    model = llm_server.script([{"content": answer(line), "delay": 1.0}])
    engine = AttributionEngine(repo)
    enrichment = EnrichmentListener(repo, config(llm_server, model, key_file, timeout_s=10))
    seen: list[int] = []
    after = threading.Event()

    def later_listener(event: Any) -> None:  # registered after the enrichment listener
        seen.append(event.cycle)
        after.set()

    engine.add_listener(enrichment)
    engine.add_listener(later_listener)
    try:
        verdict = engine.analyze_cycle(JOB, 1, log).to_dict()
        stored = repo.get_cycle(JOB, 1)
        assert stored is not None and stored.verdict["decision"] == verdict["decision"]
        assert stored.llm is None, "enrichment must not run before the verdict is returned"
        # the next listener is not held up by the slow model either
        assert after.wait(5) and seen == [1]
        assert engine.drain(5)
        assert enrichment.drain(15)
        rec = repo.get_cycle(JOB, 1)
        assert rec is not None and rec.llm is not None
        assert rec.llm["status"] == "ok" and rec.llm["model"] == model
        assert rec.llm["latency_ms"] >= 1000  # it did wait for the slow model, off the path
    finally:
        engine.close()
        enrichment.close()


def test_grounded_workload_answer_replaces_the_stored_verdict_with_stop(
    llm_server: LLMServer, key_file: Path, tmp_path: Path, repo: HistoryRepository
) -> None:
    log, line = write_log(tmp_path)
    verdict = make_verdict(line)
    event = _event(repo, log, verdict)
    audit_dir = tmp_path / "audit"
    AuditWriter(audit_dir, repo=repo)(event)
    model = llm_server.script([{"content": answer(line)}])
    results: list[dict[str, Any]] = []
    listener = EnrichmentListener(
        repo, config(llm_server, model, key_file), on_result=lambda e, r: results.append(r)
    )
    listener(event)
    assert listener.drain(10)
    listener.close()
    rec = repo.get_cycle(JOB, 1)
    assert rec is not None
    assert rec.verdict["decision"] == "STOP" and rec.verdict["rule"] == RULE
    assert rec.llm["contributed"] is True and rec.llm_contributed is True
    assert rec.llm["deterministic"]["decision"] == "RESTART"
    assert rec.audit_path is not None and rec.log_path == str(log)
    # the audit artifact stays the deterministic record; the sidecar says what the LLM did
    artifact = json.loads(Path(rec.audit_path).read_text())
    assert artifact["decision"] == "RESTART"
    sidecar = audit_sidecar_path(rec.audit_path)
    assert sidecar.name == "cycle_1.llm.json"
    side = json.loads(sidecar.read_text())
    assert side["deterministic"]["decision"] == "RESTART" and side["final"]["decision"] == "STOP"
    assert side["llm"]["contributed"] is True and side["llm"]["tokens"]["prompt"] > 0
    assert results and results[0]["decision"] == "STOP"
    assert KEY not in sidecar.read_text()


def test_failing_model_is_recorded_and_changes_nothing(
    llm_server: LLMServer, key_file: Path, tmp_path: Path, repo: HistoryRepository
) -> None:
    log, line = write_log(tmp_path)
    verdict = make_verdict(line)
    event = _event(repo, log, verdict)
    model = llm_server.script([{"status": 500, "echo_key": True}])
    listener = EnrichmentListener(
        repo, config(llm_server, model, key_file, max_retries=1), audit_dir=tmp_path / "a"
    )
    listener(event)
    assert listener.drain(10)
    listener.close()
    rec = repo.get_cycle(JOB, 1)
    assert (
        rec is not None
        and rec.verdict["decision"] == "RESTART"
        and rec.verdict["rule"] == verdict["rule"]
    )
    assert rec.llm["contributed"] is False and rec.llm["error"].startswith("http_error: HTTP 500")
    sidecar = tmp_path / "a" / JOB / "cycle_1.llm.json"
    assert KEY not in sidecar.read_text() and KEY not in json.dumps(rec.llm)


@pytest.mark.parametrize(
    "change",
    [
        {"rule": "restart.infrastructure"},  # re-analysed under another rule
        # decided again with the same rule and primary, but naming an unhealthy node
        {"node_health": [{"node": "node1", "healthy": False}]},
    ],
    ids=["other_rule", "node_health"],
)
def test_a_verdict_replaced_meanwhile_is_not_overwritten(
    llm_server: LLMServer,
    key_file: Path,
    tmp_path: Path,
    repo: HistoryRepository,
    change: dict[str, Any],
) -> None:
    log, line = write_log(tmp_path)
    event = _event(repo, log, make_verdict(line))
    newer = {**make_verdict(line), **change}  # saved while the model was thinking
    model = llm_server.script([{"content": answer(line), "delay": 0.5}])
    listener = EnrichmentListener(repo, config(llm_server, model, key_file))
    listener(event)
    repo.save_verdict(JOB, 1, newer)
    assert listener.drain(10)
    listener.close()
    rec = repo.get_cycle(JOB, 1)
    assert rec is not None and rec.verdict["decision"] == "RESTART"
    assert all(rec.verdict[k] == v for k, v in change.items())
    assert rec.llm["contributed"] is False
    assert rec.llm["not_used_because"] == "the stored verdict changed meanwhile"


def test_apply_policy_off_only_records(
    llm_server: LLMServer, key_file: Path, tmp_path: Path, repo: HistoryRepository
) -> None:
    log, line = write_log(tmp_path)
    event = _event(repo, log, make_verdict(line))
    model = llm_server.script([{"content": answer(line)}])
    listener = EnrichmentListener(repo, config(llm_server, model, key_file), apply_policy=False)
    listener(event)
    assert listener.drain(10)
    listener.close()
    rec = repo.get_cycle(JOB, 1)
    assert rec is not None and rec.verdict["decision"] == "RESTART"
    assert rec.llm["grounded"] is True and rec.llm["contributed"] is False
    assert rec.llm["not_used_because"] == "policy use is switched off"
