"""`apply_enrichment`: the one way an LLM answer may change a verdict — and only shorten.

An enrichment contributes only when all of these hold (otherwise the verdict is returned
unchanged, with the enrichment recorded under `llm` and `contributed: false` plus why):

- the answer arrived in time, parsed, matched the schema and is grounded (every claim
  cites lines that exist in the log and contain the quoted text);
- at least one owner or outlook citation is a line the model was shown (the primary
  evidence window), so the answer is about this failure;
- the deterministic verdict is RESTART, its primary evidence is a workload failure whose
  `recoverability` is listed in `shortenable.yaml` (a probable workload bug that would STOP
  on its first identical recurrence; optionally also restricted to listed rule ids), no
  root, diagnostic or confirmation evidence and no Flight Recorder finding points at
  infrastructure (cascades and teardown follow any root and do not count), and no prior
  cycle had this root yet (the wait is still pending);
- the model says owner "workload", outlook "will_not_recover" and
  `deterministic_workload_bug: true`.

Then the verdict becomes STOP with rule `llm_grounded_workload_bug`; the deterministic
decision, rule and basis are kept under `llm.deterministic`. Nothing here can turn an
infrastructure failure, an unknown failure or a STOP into anything else.
"""

from __future__ import annotations

import copy
from functools import cache
from importlib import resources
from typing import Any

import yaml

from relaunch.restart_agent.model import (
    CascadeGroup,
    Decision,
    Evidence,
    PolicyConfig,
    Rule,
    Verdict,
)

RULE = Rule.LLM_GROUNDED_WORKLOAD_BUG.value  # plain str: the verdict here is the stored dict
HOW = "shortened the workload retry budget: STOP now instead of waiting for an identical recurrence"


@cache
def _table() -> dict[str, frozenset[str]]:
    text = resources.files(__package__).joinpath("shortenable.yaml").read_text("utf-8")
    data = yaml.safe_load(text) or {}
    return {
        "recoverability": frozenset(str(r) for r in data.get("recoverability") or []),
        "rules": frozenset(str(r) for r in data.get("rules") or []),
    }


def shortenable_recoverability() -> frozenset[str]:
    """Primary `recoverability` values whose retry budget a grounded answer may shorten."""
    return _table()["recoverability"]


def shortenable_rules() -> frozenset[str]:
    """Deterministic rule ids that may be shortened (empty: any rule, by recoverability)."""
    return _table()["rules"]


def llm_record(enrichment: dict[str, Any] | None) -> dict[str, Any]:
    """The verdict's `llm` object for an enrichment (contributed: false until policy says so)."""
    if not enrichment:
        return {"contributed": False}
    answer = enrichment.get("answer") or {}
    owner = answer.get("owner") or {}
    outlook = answer.get("recovery_outlook") or {}
    explanation = answer.get("explanation") or {}
    return {
        "contributed": False,
        "how": None,
        "model": enrichment.get("model"),
        "tokens": dict(enrichment.get("tokens") or {}),
        "latency_ms": enrichment.get("latency_ms"),
        "grounded": bool(enrichment.get("grounded")),
        "error": enrichment.get("error"),
        "late": bool(enrichment.get("late")),
        "status": enrichment.get("status"),
        "explanation": explanation.get("text"),
        "owner": owner.get("value"),
        "recovery_outlook": outlook.get("value"),
        "recovery_text": outlook.get("text"),
        "deterministic_workload_bug": answer.get("deterministic_workload_bug"),
        "claims": dict(enrichment.get("claims") or {}),
        "citations": {
            name: list((answer.get(name) or {}).get("citations") or [])
            for name in ("explanation", "owner", "recovery_outlook")
            if answer.get(name)
        },
        "response_format": enrichment.get("response_format"),
        "attempts": enrichment.get("attempts"),
        "prompt": enrichment.get("prompt"),
    }


def why_not(
    verdict: dict[str, Any], enrichment: dict[str, Any] | None, policy: PolicyConfig
) -> str | None:
    """None when the enrichment may shorten the verdict, else the first reason it may not."""
    if not enrichment:
        return "no enrichment"
    if enrichment.get("status") != "ok":
        return f"enrichment failed ({enrichment.get('error')})"
    if enrichment.get("late"):
        return "answer was late"
    timeout_s = enrichment.get("timeout_s")
    latency = enrichment.get("latency_ms")
    if (
        isinstance(timeout_s, (int, float))
        and isinstance(latency, (int, float))
        and latency > timeout_s * 1000 + 500
    ):
        return "answer was late"
    if not enrichment.get("grounded"):
        bad = [k for k, ok in (enrichment.get("claims") or {}).items() if not ok]
        return f"answer is not grounded ({', '.join(bad) or 'no claims'})"
    answer = enrichment.get("answer") or {}
    v = Verdict.read(verdict)  # the stored JSON form, read once
    if v is None or v.decision != Decision.RESTART:
        return "verdict is already STOP"
    domain = v.primary.domain if v.primary else None
    recoverability = v.primary.recoverability if v.primary else None
    if domain != "workload":
        return f"primary failure is {domain or 'unknown'}, not a workload bug"
    if recoverability not in shortenable_recoverability():
        return f"recoverability {recoverability!r} has no workload retry budget an LLM may shorten"
    rules = shortenable_rules()
    rule = str(v.rule) if v.rule else None
    if rules and rule not in rules:
        return f"rule {rule!r} has no retry budget an LLM may shorten"
    if _mentions_infrastructure(v):
        return "evidence points at infrastructure"
    prior = v.history.same_root_prior_cycles or 0
    if prior >= max(1, policy.workload_recurrence_stop):
        return "the recurrence wait is already over"
    if (answer.get("owner") or {}).get("value") != "workload":
        return "model does not say the workload owns the failure"
    if (answer.get("recovery_outlook") or {}).get("value") != "will_not_recover":
        return "model does not say restarts cannot help"
    if answer.get("deterministic_workload_bug") is not True:
        return "model does not say it is a deterministic workload bug"
    cited = [
        c
        for name in ("owner", "recovery_outlook")
        for c in (answer.get(name) or {}).get("citations") or []
    ]
    if not any(c.get("grounded") and c.get("shown") for c in cited):
        return "owner/outlook cite no line of the primary evidence window"
    return None


def _mentions_infrastructure(verdict: Verdict) -> bool:
    """Infrastructure evidence other than cascades/teardown (which follow any root failure:
    an NCCL watchdog timeout after a rank's ValueError says nothing against the workload)."""
    items: list[Evidence | CascadeGroup] = [*verdict.evidence, *verdict.cascades]
    if any(
        getattr(e, "domain", None) == "infrastructure" and e.role not in ("cascade", "teardown")
        for e in items
    ):
        return True
    return bool(verdict.fr.culprit_ranks) if verdict.fr is not None else False


def apply_enrichment(
    verdict: dict[str, Any], enrichment: dict[str, Any] | None, policy: PolicyConfig | None = None
) -> dict[str, Any]:
    """A copy of `verdict` with `llm` filled in, and STOP when the rules above allow it."""
    policy = policy or PolicyConfig()
    out = copy.deepcopy(verdict)
    record = llm_record(enrichment)
    reason = why_not(verdict, enrichment, policy)
    if reason is None:
        record["contributed"] = True
        record["how"] = HOW
        record["deterministic"] = {k: verdict.get(k) for k in ("decision", "rule", "basis")}
        out["decision"] = Decision.STOP.value
        out["rule"] = RULE
        out["basis"] = (
            f"{verdict.get('basis') or ''} An LLM answer grounded in the log says this is a "
            "deterministic workload bug, so the job stops now instead of after an identical "
            "recurrence."
        ).strip()
    elif enrichment:
        record["not_used_because"] = reason
    out["llm"] = record
    return out
