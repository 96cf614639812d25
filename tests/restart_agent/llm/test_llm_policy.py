"""`apply_enrichment`: a grounded answer may only shorten a workload bug's retry budget."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from relaunch.restart_agent.llm import apply_enrichment, enrich, enrich_and_apply
from relaunch.restart_agent.llm.policy import RULE, shortenable_recoverability, shortenable_rules
from relaunch.restart_agent.model import Evidence, PolicyConfig
from tests._llm_helpers import SHORTENABLE_RULE, answer, config, make_verdict, write_log
from tests._llm_server import LLMServer


def _enriched(
    server: LLMServer, key: Path, log: Path, verdict: dict[str, Any], content: str, **kw: Any
) -> dict[str, Any]:
    model = server.script([{"content": content}])
    return enrich(verdict, log, config(server, model, key, **kw))


def test_the_table_lists_only_workload_recurrence_budgets() -> None:
    assert shortenable_recoverability() == {"probable", "user_import", "config"}
    assert not {"retry", "unknown", "terminated", "stop", "n/a"} & shortenable_recoverability()
    assert shortenable_rules() == {SHORTENABLE_RULE}


def test_grounded_deterministic_workload_bug_stops_now(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    verdict = make_verdict(line)
    before = copy.deepcopy(verdict)
    model = llm_server.script([{"content": answer(line)}])
    out = enrich_and_apply(verdict, log, config(llm_server, model, key_file))
    assert verdict == before, "the input verdict must not be mutated"
    assert out["decision"] == "STOP" and out["rule"] == RULE
    assert "grounded in the log" in out["basis"]
    llm = out["llm"]
    assert llm["contributed"] is True
    assert llm["how"].startswith("shortened the workload retry budget")
    assert llm["deterministic"] == {k: verdict[k] for k in ("decision", "rule", "basis")}
    assert llm["model"] == model and llm["grounded"] is True and llm["error"] is None
    assert llm["tokens"]["prompt"] > 0 and llm["tokens"]["completion"] > 0
    assert llm["latency_ms"] > 0
    assert llm["owner"] == "workload" and llm["recovery_outlook"] == "will_not_recover"
    assert llm["citations"]["owner"][0]["line"] == line
    # everything else of the deterministic verdict is untouched
    for key in ("primary", "cascades", "progress", "history", "budgets", "evidence"):
        assert out[key] == verdict[key]
    json.dumps(out)  # stays JSON


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"domain": "infrastructure"}, "primary failure is infrastructure"),
        ({"domain": "unknown"}, "primary failure is unknown"),
        ({"decision": "STOP", "rule": "workload_certain_stop"}, "verdict is already STOP"),
        ({"recoverability": "retry"}, "'retry' has no workload retry budget"),
        ({"recoverability": "unknown"}, "'unknown' has no workload retry budget"),
        ({"rule": "restart.progress"}, "rule 'restart.progress' has no retry budget"),
        ({"same_root": 1}, "the recurrence wait is already over"),
    ],
    ids=[
        "infrastructure",
        "unknown",
        "already-stop",
        "retry",
        "unknown-hint",
        "progress-rule",
        "recurrence-seen",
    ],
)
def test_verdicts_the_policy_must_not_shorten(
    llm_server: LLMServer, key_file: Path, tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    log, line = write_log(tmp_path)
    verdict = make_verdict(line, **change)
    enrichment = _enriched(llm_server, key_file, log, verdict, answer(line))
    assert enrichment["grounded"] is True
    out = apply_enrichment(verdict, enrichment, PolicyConfig())
    assert out["decision"] == verdict["decision"] and out["rule"] == verdict["rule"]
    assert out["llm"]["contributed"] is False
    assert reason in out["llm"]["not_used_because"]


def test_infrastructure_evidence_or_fr_culprits_block_it(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    xid = Evidence(
        line=3,
        rank=None,
        pattern_id="nvidia.xid",
        failure_class="gpu_xid",
        domain="infrastructure",
        role="diagnostic",
        recoverability="retry",
        text="NVRM: Xid 79",
        fingerprint="gpu_xid:79",
    )
    verdict = make_verdict(line, extra_evidence=[xid])
    enrichment = _enriched(llm_server, key_file, log, verdict, answer(line))
    out = apply_enrichment(verdict, enrichment)
    assert (
        out["decision"] == "RESTART"
        and out["llm"]["not_used_because"] == "evidence points at infrastructure"
    )
    fr = make_verdict(line)
    fr["fr"] = {"culprit_ranks": [2]}
    assert apply_enrichment(fr, enrichment)["decision"] == "RESTART"
    root = make_verdict(line, extra_evidence=[dataclasses.replace(xid, role="root")])
    assert apply_enrichment(root, enrichment)["decision"] == "RESTART"
    # cascades of the root (NCCL watchdog timeouts on the other ranks) do not block it
    watchdog = dataclasses.replace(
        xid,
        line=line + 1,
        failure_class="nccl_watchdog_timeout",
        role="cascade",
        text="Watchdog caught",
    )
    cascaded = make_verdict(line, extra_evidence=[watchdog])
    assert apply_enrichment(cascaded, enrichment)["decision"] == "STOP"


@pytest.mark.parametrize(
    ("content_kw", "reason"),
    [
        ({"owner": "infrastructure"}, "does not say the workload owns"),
        ({"owner": "unknown"}, "does not say the workload owns"),
        ({"outlook": "recovers_on_restart"}, "does not say restarts cannot help"),
        ({"outlook": "uncertain"}, "does not say restarts cannot help"),
        ({"bug": False}, "does not say it is a deterministic workload bug"),
    ],
)
def test_the_model_must_say_all_three_things(
    llm_server: LLMServer, key_file: Path, tmp_path: Path, content_kw: dict[str, Any], reason: str
) -> None:
    log, line = write_log(tmp_path)
    verdict = make_verdict(line)
    out = apply_enrichment(
        verdict, _enriched(llm_server, key_file, log, verdict, answer(line, **content_kw))
    )
    assert out["decision"] == "RESTART" and out["llm"]["contributed"] is False
    assert reason in out["llm"]["not_used_because"]


def test_ungrounded_answer_never_contributes(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    verdict = make_verdict(line)
    out = apply_enrichment(
        verdict, _enriched(llm_server, key_file, log, verdict, answer(line + 10_000))
    )
    assert out["decision"] == "RESTART"
    assert out["llm"]["grounded"] is False
    assert out["llm"]["not_used_because"].startswith(
        "answer is not grounded (explanation, owner, recovery_outlook)"
    )


def test_grounded_citations_outside_the_shown_window_do_not_count(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path, before=2000)
    verdict = make_verdict(line)
    # line 1 exists and contains the quote, but the model was never shown it
    out = apply_enrichment(
        verdict, _enriched(llm_server, key_file, log, verdict, answer(1, "iteration 1 |"))
    )
    assert out["llm"]["grounded"] is True
    assert out["decision"] == "RESTART"
    assert (
        out["llm"]["not_used_because"]
        == "owner/outlook cite no line of the primary evidence window"
    )


def test_late_answer_never_contributes(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    log, line = write_log(tmp_path)
    verdict = make_verdict(line)
    model = llm_server.script([{"content": answer(line), "delay": 3}])
    out = enrich_and_apply(verdict, log, config(llm_server, model, key_file, timeout_s=0.5))
    assert out["decision"] == "RESTART"
    assert out["llm"]["late"] is True and out["llm"]["error"].startswith("timeout")
    assert out["llm"]["not_used_because"].startswith("enrichment failed (timeout")
    # a record that claims success but took longer than its timeout is late too
    ok = _enriched(llm_server, key_file, log, verdict, answer(line))
    assert (
        apply_enrichment(verdict, {**ok, "latency_ms": 61_000, "timeout_s": 60})["decision"]
        == "RESTART"
    )


def test_no_enrichment_keeps_the_verdict() -> None:
    verdict = make_verdict(10)
    out = apply_enrichment(verdict, None)
    assert out == {**verdict, "llm": {"contributed": False}}


def test_no_answer_of_any_kind_stops_an_infrastructure_failure(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    """Exhaustive over answer values, rules and decisions: infrastructure stays as decided."""
    log, line = write_log(tmp_path)
    base = _enriched(llm_server, key_file, log, make_verdict(line), answer(line))
    rules = [
        SHORTENABLE_RULE,
        "restart.infrastructure",
        "restart.progress",
        "stop.same_root_ceiling",
    ]
    for owner, outlook, bug, rule, decision, hint in itertools.product(
        ("workload", "infrastructure", "unknown"),
        ("recovers_on_restart", "will_not_recover", "uncertain"),
        (True, False),
        rules,
        ("RESTART", "STOP"),
        ("probable", "retry", "unknown", "config"),
    ):
        verdict = make_verdict(
            line, domain="infrastructure", rule=rule, decision=decision, recoverability=hint
        )
        enrichment = copy.deepcopy(base)
        enrichment["answer"]["owner"]["value"] = owner
        enrichment["answer"]["recovery_outlook"]["value"] = outlook
        enrichment["answer"]["deterministic_workload_bug"] = bug
        out = apply_enrichment(verdict, enrichment)
        assert (out["decision"], out["rule"]) == (decision, rule)
        assert out["llm"]["contributed"] is False
