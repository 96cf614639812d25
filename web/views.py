"""View models of the dashboard: turn repository records into what the templates show.

Pure functions over `storage.records.JobRecord`/`CycleRecord` (or their `to_dict()`
forms): durations, exit causes, the progress plot's coordinates, the cycle page's
evidence split into primary / supporting / folded cascades, FR findings and the LLM
explanation. No I/O, no HTML: the templates escape everything they print.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import datetime
from typing import Any

from relaunch.restart_agent.model import Decision, Verdict
from relaunch.web.straggler_strip import straggler_strip

TERMINAL_STATES = frozenset({"succeeded", "failed", "stopped", "interrupted", "lost"})
# the jobs list's counts, always shown (any other state stored is shown when it occurs)
COUNTED_STATES = ("running", "stopped", "failed", "succeeded", "interrupted")

# what the deciding verdict did (storage.job_end.verdict_effect), in words
_EFFECT_TEXT: dict[tuple[str, str], str] = {
    (Decision.STOP, "acted"): "acted on: the launcher ended the job on this STOP",
    (
        Decision.STOP,
        "recorded",
    ): "recorded only: the launcher did not stop the job on it (acting on "
    "STOP is opt-in: --ft-attribution-stop-action no-restart)",
    (Decision.STOP, "pending"): "pending: the job ends on it only with "
    "--ft-attribution-stop-action no-restart",
    (Decision.RESTART, "acted"): "acted on: the launcher restarted the workers",
    (Decision.RESTART, "recorded"): "recorded only: the job ended before another cycle started",
    (Decision.RESTART, "pending"): "pending: the launcher restarts the workers",
}
_EFFECT_BADGE = {"acted": "acted on", "recorded": "recorded only", "pending": "pending"}


def as_dict(record: Any) -> dict[str, Any]:
    """A record (dataclass with or without `to_dict`, or a mapping) as a plain dict."""
    if record is None:
        return {}
    if isinstance(record, Mapping):
        return dict(record)
    if hasattr(record, "to_dict"):
        return dict(record.to_dict())
    if is_dataclass(record) and not isinstance(record, type):
        return asdict(record)
    raise TypeError(f"cannot show a {type(record).__name__}")


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def fmt_time(value: Any) -> str:
    t = _time(value)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC") if t else ""


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return ""
    s = int(round(seconds))
    if s < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def fmt_bytes(n: Any) -> str:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return ""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


def checkpoint_view(
    ck: Mapping[str, Any] | None, *, until: datetime | None, running: bool
) -> dict[str, Any] | None:
    """The newest complete checkpoint ({cycle, step, tier, size, at}, storage's
    `newest_checkpoints`) as shown, with the time lost since it: the wall time from the
    checkpoint to `until` (the job's last cycle end, or now while a cycle runs), the work
    a restart from it would redo. None when the job reported no checkpoint."""
    if not ck or ck.get("step") is None:
        return None
    at = _time(ck.get("at"))
    lost = (until - at).total_seconds() if at is not None and until is not None else None
    if lost is not None and lost < 0:
        lost = 0.0
    return {
        "cycle": ck.get("cycle"),
        "step": ck.get("step"),
        "tier": ck.get("tier") or "",
        "size": fmt_bytes(ck.get("size")),
        "size_bytes": ck.get("size"),
        "at": fmt_time(at),
        "lost_s": lost,
        "lost": fmt_duration(lost) if lost is not None else "",
        "running": running,
    }


def duration_s(cycle: Mapping[str, Any]) -> float | None:
    """Seconds the cycle ran: start to end (or to its analysis when no end was recorded)."""
    start = _time(cycle.get("started_at"))
    end = _time(cycle.get("ended_at")) or _time(cycle.get("analysed_at"))
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def _verdict(cycle: Mapping[str, Any]) -> Verdict | None:
    """The cycle's stored verdict JSON, read once (None: none stored, or not a verdict)."""
    v = cycle.get("verdict")
    return Verdict.read(dict(v)) if isinstance(v, Mapping) else None


def exit_cause(cycle: Mapping[str, Any]) -> str:
    """One line: the primary failure class (and its text), or why there is none."""
    verdict = _verdict(cycle)
    primary = verdict.primary if verdict is not None else None
    fclass = cycle.get("failure_class") or (primary.failure_class if primary else None)
    if fclass:
        return str(fclass)
    if cycle.get("status") == "registered":
        return "running" if not cycle.get("ended_at") else "awaiting analysis"
    outcome = cycle.get("outcome")  # how the launcher ended the cycle (revision 0007)
    if outcome and not cycle.get("verdict"):
        reason = cycle.get("end_reason")
        return f"{outcome}: {reason}" if reason and outcome != "succeeded" else str(outcome)
    if cycle.get("analysis_error"):
        return f"analysis failed: {cycle['analysis_error']}"
    return "no failure evidence"


def progress_reached(cycle: Mapping[str, Any]) -> int | None:
    it = cycle.get("last_iteration")
    if it is None:
        verdict = _verdict(cycle)
        it = verdict.progress.last_iteration if verdict is not None else None
    return it if isinstance(it, int) and not isinstance(it, bool) else None


def cycle_row(record: Any) -> dict[str, Any]:
    """One row of a job's cycle timeline."""
    c = as_dict(record)
    v = _verdict(c)
    d = duration_s(c)
    return {
        "cycle": c.get("cycle"),
        "status": c.get("status"),
        "node": c.get("node"),
        "started": fmt_time(c.get("started_at")),
        "duration": fmt_duration(d),
        "duration_s": d,
        "cause": exit_cause(c),
        "basis": c.get("basis") or (v.basis if v is not None else "") or "",
        "decision": c.get("decision") or (str(v.decision) if v is not None else None),
        "rule": c.get("rule") or (str(v.rule) if v is not None else None),
        "fingerprint": c.get("fingerprint"),
        "iteration": progress_reached(c),
        "checkpoint": c.get("last_checkpoint"),
        "checkpoint_step": _int(c.get("checkpoint_step")),
        "checkpoint_tier": c.get("checkpoint_tier"),
        "checkpoint_size": _int(c.get("checkpoint_size")),
        "checkpoint_at": _time(c.get("checkpoint_at")),
        "llm": bool(c.get("llm_contributed")) or bool(c.get("llm")),
        "started_at": _time(c.get("started_at")),
        "ended_at": _time(c.get("ended_at")),
        "analysed_at": _time(c.get("analysed_at")),
        "running": c.get("status") == "registered" and not c.get("ended_at"),
        "first_iteration": _int(c.get("first_iteration")),
        "primary_rank": _int(c.get("primary_rank")),
        "node_of": c.get("primary_node") or c.get("node"),
    }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def overview_row(o: Mapping[str, Any]) -> dict[str, Any]:
    """One row of the jobs list: `HistoryRepository.job_overviews` with its deciding verdict."""
    d = o.get("deciding") or {}
    row = job_row(
        {
            **o,
            "last_decision": d.get("decision"),
            "decision_cycle": d.get("cycle"),
            "verdict_effect": d.get("effect"),
        }
    )
    row.update(
        decision=d.get("decision"),
        decision_cycle=d.get("cycle"),
        rule=d.get("rule"),
        basis=d.get("basis") or "",
        failure_class=d.get("failure_class"),
        rank=d.get("rank"),
        node=d.get("node"),
        decided=fmt_time(d.get("analysed_at")),
        failing=row["state"] in ("stopped", "failed", "lost") or d.get("decision") == Decision.STOP,
    )
    return row


def effect_text(decision: Any, effect: Any) -> str:
    """What the deciding verdict did, in one sentence ("" when unknown)."""
    return _EFFECT_TEXT.get((str(decision), str(effect)), "")


def end_text(j: Mapping[str, Any]) -> str:
    """How the job ended, one line: state, exit code, reason (or that it has not)."""
    state = str(j.get("state") or "unknown")
    code, reason = j.get("exit_code"), j.get("end_reason")
    if code is None and not reason and state not in TERMINAL_STATES:
        return "not ended: the launcher has not reported an end"
    parts = [state]
    parts.append(f"exit code {code}" if code is not None else "no exit code recorded")
    if reason:
        parts.append(str(reason))
    return " · ".join(parts)


def job_row(record: Any) -> dict[str, Any]:
    j = as_dict(record)
    effect = j.get("verdict_effect")
    decision = j.get("last_decision")
    return {
        "job_id": j.get("job_id"),
        "state": j.get("state") or "unknown",
        "cycles": j.get("cycles") or 0,
        "last_cycle": j.get("last_cycle"),
        "last_decision": j.get("last_decision"),
        "last_rule": j.get("last_rule"),
        "last_failure_class": j.get("last_failure_class"),
        "updated": fmt_time(j.get("updated_at")),
        "created": fmt_time(j.get("created_at")),
        "live": (j.get("state") or "unknown") not in TERMINAL_STATES and j.get("exit_code") is None,
        "exit_code": _int(j.get("exit_code")),
        # the launcher reported the end (a "stopped" state alone may be a STOP verdict saved
        # while the launcher runs on: acting on STOP is opt-in)
        "has_ended": j.get("exit_code") is not None
        or (j.get("state") or "unknown") in TERMINAL_STATES - {"stopped"},
        "end_reason": j.get("end_reason") or "",
        "ended": fmt_time(j.get("ended_at")),
        "end": end_text(j),
        "decision_cycle": _int(j.get("decision_cycle")),
        "effect": effect,
        "effect_badge": _EFFECT_BADGE.get(str(effect), ""),
        "effect_text": effect_text(decision, effect),
    }


@dataclass
class Plot:
    """An inline SVG plot of progress (last iteration) per cycle, laid out in Python."""

    width: int = 640
    height: int = 200
    pad_left: int = 64
    pad_bottom: int = 28
    pad_top: int = 12
    pad_right: int = 16
    points: list[dict[str, Any]] = field(default_factory=list)
    path: str = ""
    y_max: int = 0
    x_labels: list[dict[str, Any]] = field(default_factory=list)
    empty: bool = True


def progress_plot(rows: Sequence[Mapping[str, Any]], width: int = 640, height: int = 200) -> Plot:
    """Coordinates of the progress plot: one point per cycle that reported progress."""
    plot = Plot(width=width, height=height)
    known = [r for r in rows if r.get("iteration") is not None and r.get("cycle") is not None]
    if not known:
        return plot
    plot.empty = False
    cycles = [int(r["cycle"]) for r in rows if r.get("cycle") is not None]
    c_min, c_max = min(cycles), max(cycles)
    y_max = max(int(r["iteration"]) for r in known) or 1
    plot.y_max = y_max
    inner_w = width - plot.pad_left - plot.pad_right
    inner_h = height - plot.pad_top - plot.pad_bottom

    def x(c: int) -> float:
        if c_max == c_min:
            return plot.pad_left + inner_w / 2
        return plot.pad_left + (c - c_min) * inner_w / (c_max - c_min)

    def y(v: int) -> float:
        return plot.pad_top + inner_h - (v / y_max) * inner_h

    coords = []
    for r in known:
        px, py = round(x(int(r["cycle"])), 1), round(y(int(r["iteration"])), 1)
        coords.append(f"{px},{py}")
        plot.points.append(
            {
                "x": px,
                "y": py,
                "cycle": r["cycle"],
                "iteration": r["iteration"],
                "decision": r.get("decision") or "",
            }
        )
    plot.path = "M" + " L".join(coords)
    step = max(1, (c_max - c_min) // 10 or 1)
    plot.x_labels = [{"x": round(x(c), 1), "text": str(c)} for c in range(c_min, c_max + 1, step)]
    return plot


def llm_view(llm: Any) -> dict[str, Any] | None:
    """The LLM explanation of a cycle, when an enrichment was stored.

    Reads the verdict's `llm` object as `restart_agent.llm` writes it (`explanation`,
    `owner`, `recovery_outlook`, `recovery_text` as strings, `citations` per claim) and,
    for older or foreign records, the model's raw answer shape (`{"explanation": {"text",
    "citations"}, ...}`).
    """
    if not isinstance(llm, Mapping) or not llm:
        return None
    expl = llm.get("explanation")
    owner = llm.get("owner")
    outlook = llm.get("recovery_outlook")
    outlook_text = llm.get("recovery_text")
    citations: list[dict[str, Any]] = []
    raw_cites = llm.get("citations")
    if isinstance(raw_cites, Mapping):  # {claim: [{line, quote, grounded, reason}]}
        for claim, cites in raw_cites.items():
            for c in cites or []:
                if isinstance(c, Mapping):
                    citations.append({"claim": str(claim), **c})
    if isinstance(expl, Mapping):  # the model's answer shape
        citations += [
            {"claim": "explanation", **c}
            for c in expl.get("citations") or []
            if isinstance(c, Mapping)
        ]
        expl = expl.get("text")
    if isinstance(owner, Mapping):
        owner = owner.get("value")
    if isinstance(outlook, Mapping):
        outlook_text = outlook_text or outlook.get("text")
        outlook = outlook.get("value")
    return {
        "text": str(expl) if expl else None,
        "citations": citations,
        "owner": owner,
        "outlook": outlook,
        "outlook_text": outlook_text,
        "model": llm.get("model"),
        "status": llm.get("status"),
        "grounded": llm.get("grounded"),
        "contributed": bool(llm.get("contributed")),
        "how": llm.get("how"),
        "not_used_because": llm.get("not_used_because"),
        "latency_ms": llm.get("latency_ms"),
        "error": llm.get("error"),
        "raw": pretty_json(llm),
    }


def node_health_view(stored: Any, notes: Any) -> list[dict[str, Any]]:
    """Health reports of nodes around this cycle: the stored records (with every check),
    and whether the verdict took each one into account."""
    in_verdict = {str(n.get("node")) for n in notes or [] if isinstance(n, Mapping)}
    records = dict(stored) if isinstance(stored, Mapping) else {}
    for n in notes or []:  # a verdict made elsewhere may list nodes not stored here
        if isinstance(n, Mapping) and str(n.get("node")) not in records:
            records[str(n.get("node"))] = n
    out = []
    for node, rec in sorted(records.items()):
        if not isinstance(rec, Mapping):
            continue
        checks = [
            {
                "name": str(c.get("name", "")),
                "status": str(c.get("status", "")),
                "detail": str(c.get("detail", "")),
            }
            for c in rec.get("checks") or []
            if isinstance(c, Mapping)
        ]
        out.append(
            {
                "node": node,
                "host": rec.get("host"),
                "healthy": rec.get("healthy") is True,
                "reason": str(rec.get("reason") or ""),
                "ran_this_cycle": bool(rec.get("ran_this_cycle")),
                "excluded_from_cycle": rec.get("excluded_from_cycle"),
                "checks": checks,
                "in_verdict": node in in_verdict,
            }
        )
    return out


def fr_view(findings: Any) -> dict[str, Any] | None:
    """Flight Recorder findings (`attribution.fr.analyze_paths` result): culprits and groups."""
    if not isinstance(findings, Mapping) or not findings:
        return None
    groups = []
    for g in findings.get("groups") or []:
        if not isinstance(g, Mapping):
            continue
        raw_op = g.get("stalled_op")
        op = raw_op if isinstance(raw_op, Mapping) else {}
        groups.append(
            {
                "id": g.get("id"),
                "description": g.get("description"),
                "state": g.get("state"),
                "op": " ".join(
                    str(x)
                    for x in (op.get("type"), op.get("seq_id") and f"seq {op.get('seq_id')}")
                    if x
                ),
                "ranks": len(g.get("ranks") or []),
                "culprits": list(g.get("culprit_ranks") or []),
                "waiting": list(g.get("waiting_ranks") or []),
                "missing": list(g.get("missing_ranks") or []),
            }
        )
    culprits = []
    for c in findings.get("culprits") or []:
        if isinstance(c, Mapping):
            how = "; ".join(
                f"{x.get('description') or x.get('group')}: {x.get('how')}"
                for x in c.get("groups") or []
                if isinstance(x, Mapping)
            )
            culprits.append({"rank": c.get("rank"), "dump": c.get("dump"), "how": how})
    return {
        "culprit_ranks": list(findings.get("culprit_ranks") or []),
        "summary": findings.get("summary") or findings.get("basis"),
        "world_size": findings.get("world_size"),
        "ranks_read": findings.get("ranks_read"),
        "missing_ranks": list(findings.get("missing_ranks") or []),
        "groups": groups,
        "culprits": culprits,
        "raw": pretty_json(findings),
    }


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def key_values(value: Any) -> list[tuple[str, str]]:
    """Flat (key, value) rows of a budgets/history dict; nested values as compact JSON."""
    if not isinstance(value, Mapping):
        return []
    out = []
    for k, v in value.items():
        if isinstance(v, Mapping | list):
            v = json.dumps(v, sort_keys=True, default=str)
        out.append((str(k), "" if v is None else str(v)))
    return out


def cycle_detail(record: Any) -> dict[str, Any]:
    """Everything the cycle page shows."""
    c = as_dict(record)
    v = _verdict(c)
    first = v.primary if v is not None else None
    primary = first.to_dict() if first is not None else None
    # the evidence rows stored with the cycle, else the verdict's own evidence lines
    stored_rows = c.get("evidence") or ([e.to_dict() for e in v.evidence] if v else [])
    evidence = [e for e in stored_rows if e]
    supporting = []
    for e in evidence:
        is_primary = (
            e.get("primary") is True
            or bool(e.get("is_primary"))
            or (
                first is not None
                and e.get("line") == first.line
                and e.get("failure_class") == first.failure_class
            )
        )
        if not is_primary:
            supporting.append(e)
    row = cycle_row(c)
    stored = c.get("verdict") if isinstance(c.get("verdict"), Mapping) else None
    return {
        **row,
        "job_id": c.get("job_id"),
        "log_path": c.get("log_path"),
        "log_size": c.get("log_size"),
        "log_sha256": c.get("log_sha256"),
        "analysed": fmt_time(c.get("analysed_at")),
        "ended": fmt_time(c.get("ended_at")),
        "audit_path": c.get("audit_path"),
        "primary": primary,
        # (line, rank) of the primary evidence: where the page's log excerpt is centred
        "excerpt_at": (first.line, first.rank) if first and isinstance(first.line, int) else None,
        "supporting": supporting,
        "cascades": [g.to_dict() for g in v.cascades] if v else [],
        "history": key_values(v.history.to_dict() if v else None),
        "budgets": key_values(v.budgets.to_dict() if v else None),
        "progress": v.progress.to_dict() if v else {},
        "fan_out": key_values(v.fan_out.to_dict() if v else None),
        "fr": fr_view(c.get("fr_findings") or (v.fr.to_dict() if v and v.fr else None)),
        "node_health": node_health_view(
            c.get("node_health"), [n.to_dict() for n in v.node_health] if v else None
        ),
        "llm": llm_view(c.get("llm")),
        "llm_contributed": bool(v and v.llm.contributed),
        "has_verdict": bool(stored),
        "verdict_json": pretty_json(stored) if stored else "",
        "stragglers": straggler_strip(
            c.get("stragglers") or (v.stragglers.to_dict() if v and v.stragglers else None)
        ),
    }
