"""Audit artifacts: one JSON file per verdict that records everything needed to re-check it.

`AuditWriter` is an engine listener: after each saved verdict it writes
`<audit_dir>/<job>/cycle_<N>.json` (schema `relaunch.audit/1`, see docs/service.md) with
the inputs' identity (path, size, sha256), the prior cycles the policy saw, the policy
budgets, FR culprit ranks, the evidence lines, fingerprint, progress, history counts, rule,
decision, timings and software version; then records the file's path with the cycle.

`recheck(artifact)` recomputes the verdict from the recorded inputs and lists every
difference; `relaunch audit FILE` prints them and exits non-zero when there is one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attribution.files import safe_name, write_json_atomic
from restart_agent.model import NodeHealthNote, PolicyConfig, PriorCycle

log = logging.getLogger(__name__)

SCHEMA = "relaunch.audit/1"
SCHEMA_VERSION = 1
# verdict keys whose recomputed value must equal the recorded one
COMPARED_KEYS = (
    "decision",
    "rule",
    "basis",
    "primary",
    "cascades",
    "progress",
    "history",
    "budgets",
    "evidence",
    "fan_out",
    "node_health",
)
SCAN_COMPARED = ("lines", "bytes")


def software_version() -> str:
    try:
        from importlib.metadata import version

        return version("relaunch")
    except Exception:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            m = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M)
            return m.group(1) if m else "unknown"
        except OSError:
            return "unknown"


def _safe(name: str) -> str:
    return safe_name(name)[:200] or "job"


def artifact_path(audit_dir: str | os.PathLike[str], job_id: str, cycle: int) -> Path:
    return Path(audit_dir) / _safe(job_id) / f"cycle_{cycle}.json"


def build_artifact(
    *,
    job_id: str,
    cycle: int,
    verdict: dict[str, Any],
    log_identity: dict[str, Any],
    history: list[PriorCycle],
    policy: PolicyConfig,
    fr_culprit_ranks: list[int] | None,
    analysis_ms: float | None,
    extra_timings: dict[str, Any] | None = None,
    node_health: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The audit document for one verdict (pure; `AuditWriter` adds the file)."""
    primary = verdict.get("primary") or {}
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "software": {
            "relaunch": software_version(),
            "python": platform.python_version(),
        },
        "job_id": job_id,
        "cycle": cycle,
        "inputs": {
            "log": {
                "path": log_identity.get("path"),
                "size": log_identity.get("size"),
                "sha256": log_identity.get("sha256"),
            },
            "history": [asdict(p) for p in history],
            "policy": asdict(policy),
            "fr_culprit_ranks": fr_culprit_ranks,
            "node_health": node_health if node_health is not None else [],
        },
        "decision": verdict.get("decision"),
        "rule": verdict.get("rule"),
        "basis": verdict.get("basis"),
        "fingerprint": primary.get("fingerprint"),
        "failure_class": primary.get("failure_class"),
        "evidence": verdict.get("evidence") or [],
        "progress": verdict.get("progress"),
        "history_counts": verdict.get("history"),
        "budgets": verdict.get("budgets"),
        "llm": verdict.get("llm"),
        "timings": {"analysis_ms": analysis_ms, **(extra_timings or {})},
        "verdict": verdict,
    }


def write_artifact(doc: dict[str, Any], path: Path) -> Path:
    """Write atomically (temp file + rename): a reader never sees half a file."""
    return write_json_atomic(path, doc)


class AuditWriter:
    """Engine listener writing one audit artifact per verdict.

    `audit_dir` defaults to the event's `audit_dir` (the engine's). The prior cycles, the
    policy and the FR culprit ranks are the ones the engine decided with
    (`event.extra["prior_cycles"]`, `["policy"]`, `["fr_culprit_ranks"]`,
    `["node_health"]`), never re-read
    after the save; `policy` is used only for events that carry none. With `repo`, the
    artifact's path is saved with the cycle (`set_audit_path`).
    """

    def __init__(
        self,
        audit_dir: str | os.PathLike[str] | None = None,
        *,
        repo: Any = None,
        policy: PolicyConfig | None = None,
    ) -> None:
        self.audit_dir = Path(audit_dir) if audit_dir is not None else None
        self.repo = repo
        self.policy = policy or PolicyConfig()
        self.written = 0

    def __call__(self, event: Any) -> Path | None:
        audit_dir = self.audit_dir or (Path(event.audit_dir) if event.audit_dir else None)
        if audit_dir is None:
            return None
        t0 = time.perf_counter()
        extra = event.extra or {}
        fr = extra.get("fr_culprit_ranks")
        if "prior_cycles" in extra:  # what the policy saw, as the engine decided
            history = [_prior(p) for p in extra["prior_cycles"] or []]
        elif self.repo is not None:  # an event from an older caller: best effort
            prior = self.repo.prior_verdicts(event.job_id, event.cycle)
            history = [PriorCycle.from_verdict(c, v) for c, v in prior]
        else:
            history = []
        policy = _policy(extra["policy"]) if isinstance(extra.get("policy"), dict) else self.policy
        if fr is None and "fr_culprit_ranks" not in extra and self.repo is not None:
            rec = self.repo.get_cycle(event.job_id, event.cycle)
            ranks = (rec.fr_findings or {}).get("culprit_ranks") if rec else None
            fr = list(ranks) if isinstance(ranks, list) else None
        doc = build_artifact(
            job_id=event.job_id,
            cycle=event.cycle,
            verdict=event.verdict,
            log_identity=event.log_identity or {"path": event.log_path},
            history=history,
            policy=policy,
            fr_culprit_ranks=fr,
            analysis_ms=event.analysis_ms,
            node_health=extra.get("node_health") or (event.verdict or {}).get("node_health"),
        )
        path = artifact_path(audit_dir, event.job_id, event.cycle)
        doc["timings"]["audit_ms"] = round((time.perf_counter() - t0) * 1000.0, 3)
        write_artifact(doc, path)
        self.written += 1
        if self.repo is not None:
            self.repo.set_audit_path(event.job_id, event.cycle, str(path))
        return path


# --- re-check -------------------------------------------------------------------------


class AuditFormatError(ValueError):
    """The file is not a readable audit artifact of a known schema."""


@dataclass
class RecheckResult:
    path: str
    ok: bool
    input_ok: bool
    differences: list[dict[str, Any]] = field(default_factory=list)
    recomputed: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "artifact": self.path,
            "ok": self.ok,
            "input_ok": self.input_ok,
            "differences": self.differences,
            "recomputed_decision": (self.recomputed or {}).get("decision"),
            "recomputed_rule": (self.recomputed or {}).get("rule"),
        }


def load_artifact(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise AuditFormatError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise AuditFormatError(f"is a directory: {path}") from None
    except PermissionError:
        raise AuditFormatError(f"not readable: {path}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AuditFormatError(f"not a JSON audit artifact: {path} ({exc})") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("relaunch.audit/"):
        raise AuditFormatError(f"not a relaunch audit artifact (no schema): {path}")
    if doc.get("schema") != SCHEMA:
        raise AuditFormatError(
            f"unsupported audit schema {doc.get('schema')!r} (this version reads {SCHEMA})"
        )
    for key in ("inputs", "verdict"):
        if not isinstance(doc.get(key), dict):
            raise AuditFormatError(f"audit artifact lacks {key!r}: {path}")
    return doc


def _hash_file(path: str) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _policy(d: dict[str, Any]) -> PolicyConfig:
    known = {f.name for f in fields(PolicyConfig)}
    return PolicyConfig(**{k: v for k, v in (d or {}).items() if k in known})


def _prior(d: dict[str, Any]) -> PriorCycle:
    known = {f.name for f in fields(PriorCycle)}
    return PriorCycle(**{k: v for k, v in d.items() if k in known})


def recheck(path: str | os.PathLike[str]) -> RecheckResult:
    """Recompute the verdict of an artifact from its recorded inputs; list differences."""
    from restart_agent import decide, scan_file

    doc = load_artifact(path)
    inputs = doc["inputs"]
    recorded = doc["verdict"]
    log_in = inputs.get("log") or {}
    log_path = log_in.get("path")
    diffs: list[dict[str, Any]] = []
    if not log_path:
        raise AuditFormatError("audit artifact records no log path")
    try:
        size, sha = _hash_file(log_path)
    except OSError as exc:
        diffs.append({"field": "inputs.log", "recorded": log_path, "now": f"unreadable: {exc}"})
        return RecheckResult(str(path), ok=False, input_ok=False, differences=diffs)
    input_ok = True
    if log_in.get("size") is not None and size != log_in["size"]:
        input_ok = False
        diffs.append({"field": "inputs.log.size", "recorded": log_in["size"], "now": size})
    if log_in.get("sha256") and sha != log_in["sha256"]:
        input_ok = False
        diffs.append({"field": "inputs.log.sha256", "recorded": log_in["sha256"], "now": sha})
    try:
        history = [_prior(h) for h in inputs.get("history") or []]
        policy = _policy(inputs.get("policy") or {})
    except TypeError as exc:
        raise AuditFormatError(f"bad recorded inputs: {exc}") from None
    evidence = scan_file(log_path)
    fr = inputs.get("fr_culprit_ranks")
    try:
        notes = [NodeHealthNote.from_dict(n) for n in inputs.get("node_health") or []]
    except (ValueError, AttributeError, TypeError) as exc:
        raise AuditFormatError(f"bad recorded node_health: {exc}") from None
    verdict = decide(evidence, history, policy, fr_culprit_ranks=fr, node_health=notes).to_dict()
    for key in COMPARED_KEYS:
        if key in recorded and _norm(recorded.get(key)) != _norm(verdict.get(key)):
            diffs.append(
                {"field": f"verdict.{key}", "recorded": recorded.get(key), "now": verdict.get(key)}
            )
    rscan, nscan = recorded.get("scan") or {}, verdict.get("scan") or {}
    for key in SCAN_COMPARED:
        if key in rscan and key in nscan and rscan[key] != nscan[key]:
            diffs.append(
                {"field": f"verdict.scan.{key}", "recorded": rscan[key], "now": nscan[key]}
            )
    return RecheckResult(
        str(path), ok=not diffs, input_ok=input_ok, differences=diffs, recomputed=verdict
    )


def _norm(value: Any) -> Any:
    """JSON round trip: tuples and lists, int keys and str keys compare as stored."""
    return json.loads(json.dumps(value, default=str))
