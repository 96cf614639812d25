"""Audit artifacts: one JSON file per verdict that records everything needed to re-check it.

`AuditWriter` is an engine listener: after each saved verdict it writes
`<audit_dir>/<job>/cycle_<N>.json` (schema `relaunch.audit/1`, see docs/service.md) with
the inputs' identity (path, size, sha256), the prior cycles the policy saw, the policy
budgets, FR culprit ranks, the evidence lines, fingerprint, progress, history counts, rule,
decision, timings and software version; then records the file's path with the cycle.

Integrity: every artifact carries `integrity.digest`, `sha256:` over the canonical JSON
(sorted keys, no spaces, UTF-8) of the whole document without the `integrity` block, and,
when the writer has a key (`hmac_key`, or the file named by $RELAUNCH_AUDIT_HMAC_KEY_FILE),
`integrity.hmac`, HMAC-SHA256 over the same bytes. The digest catches any edit by a tool
that does not recompute it; only the HMAC authenticates the artifact against someone who
can rewrite it.

`recheck(artifact, hmac_key=None)` verifies the digest (and the HMAC when given a key),
checks the top-level copies against the verdict, recomputes the verdict from the recorded
inputs and lists every difference; `relaunch audit FILE` prints them and exits 1 when
there is one. A file that is not a usable artifact (not a regular file, over 64 MiB, not
JSON, a key twice in one object, a number not spelled as the writer spells it, wrong shape
or types) raises `AuditFormatError` (exit 2): the document verified is the one every reader
sees (`parse_strict`), and the digest is recomputed from its canonical form.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import logging
import math
import os
import platform
import re
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaunch.attribution.core.files import safe_name, write_json_atomic
from relaunch.restart_agent import safe_files
from relaunch.restart_agent.model import (
    FRFindings,
    NodeHealthNote,
    PolicyConfig,
    PriorCycle,
    Verdict,
)

if TYPE_CHECKING:
    from relaunch.attribution.core.engine import VerdictEvent

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
# verdict keys every verdict has: a recorded verdict without one is a difference
REQUIRED_KEYS = ("decision", "rule", "basis", "primary", "evidence")
HMAC_KEY_ENV = "RELAUNCH_AUDIT_HMAC_KEY_FILE"
MAX_ARTIFACT_BYTES = 64 << 20
MAX_KEY_BYTES = 4096
_CHUNK = 1 << 20


def canonical_bytes(doc: dict[str, Any]) -> bytes:
    """The bytes the digest and the HMAC cover: `doc` without `integrity`, canonical JSON."""
    body = {k: v for k, v in doc.items() if k != "integrity"}
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    ).encode("utf-8", "surrogatepass")


def digest_of(doc: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_bytes(doc)).hexdigest()


def hmac_of(doc: dict[str, Any], key: bytes) -> str:
    return "hmac-sha256:" + hmac.new(key, canonical_bytes(doc), hashlib.sha256).hexdigest()


def sign(doc: dict[str, Any], key: bytes | None) -> dict[str, Any]:
    """Add the `integrity` block to `doc` (JSON-normalised first, as it will be read back)."""
    doc = json.loads(json.dumps({k: v for k, v in doc.items() if k != "integrity"}, default=str))
    integrity: dict[str, Any] = {"digest": digest_of(doc)}
    if key:
        integrity["hmac"] = hmac_of(doc, key)
    doc["integrity"] = integrity
    return doc


class KeyFileError(ValueError):
    """An HMAC key file that cannot be used (the message says why)."""


def read_key_file(path: str | os.PathLike[str]) -> bytes:
    """The HMAC key: the first line of a regular file of at most 4 KiB, stripped."""
    try:
        data = read_regular(path, MAX_KEY_BYTES)
    except OSError as exc:
        raise KeyFileError(f"cannot read HMAC key file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise KeyFileError(f"HMAC key file {path}: {exc}") from None
    lines = data.splitlines()
    key = lines[0].strip() if lines else b""
    if not key:
        raise KeyFileError(f"HMAC key file {path} is empty")
    return key


def key_from_env() -> bytes | None:
    """The key of the file named by $RELAUNCH_AUDIT_HMAC_KEY_FILE, None when unset."""
    path = os.environ.get(HMAC_KEY_ENV)
    return read_key_file(path) if path else None


def open_regular(path: str | os.PathLike[str]) -> int:
    """A descriptor of `path` opened without blocking (`restart_agent.safe_files`); a
    non-regular file is ValueError."""
    try:
        return safe_files.open_regular(path)
    except safe_files.NotRegularFile:
        raise ValueError("not a regular file (a FIFO, device or socket)") from None


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """All of a regular file, refused (ValueError) before reading when over `limit` bytes."""
    fd = open_regular(path)
    try:
        return safe_files.read_fd_bounded(fd, limit, os.fspath(path))
    except safe_files.TooLarge:
        raise ValueError(f"larger than {limit} bytes") from None
    finally:
        os.close(fd)


def software_version() -> str:
    try:
        from importlib.metadata import version

        return version("relaunch")
    except ImportError:  # no metadata (PackageNotFoundError is one)
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
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
    verdict: Verdict,
    log_identity: dict[str, Any],
    history: list[PriorCycle],
    policy: PolicyConfig,
    fr_culprit_ranks: list[int] | None,
    analysis_ms: float | None,
    extra_timings: dict[str, Any] | None = None,
    node_health: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The audit document for one verdict (pure; `AuditWriter` adds the file). The
    top-level copies are the typed parts' JSON, the same as in `verdict`'s."""
    primary = verdict.primary
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
        "decision": str(verdict.decision),
        "rule": str(verdict.rule),
        "basis": verdict.basis,
        "fingerprint": primary.fingerprint if primary else None,
        "failure_class": primary.failure_class if primary else None,
        "evidence": [e.to_dict() for e in verdict.evidence],
        "progress": verdict.progress.to_dict(),
        "history_counts": verdict.history.to_dict(),
        "budgets": verdict.budgets.to_dict(),
        "llm": verdict.llm.to_dict(),
        "timings": {"analysis_ms": analysis_ms, **(extra_timings or {})},
        "verdict": verdict.to_dict(),  # the artifact (a file): the edge
    }


def write_artifact(doc: dict[str, Any], path: Path) -> Path:
    """Write atomically (temp file + rename): a reader never sees half a file."""
    return write_json_atomic(path, doc)


class AuditWriter:
    """Engine listener writing one audit artifact per verdict.

    `audit_dir` defaults to the event's `audit_dir` (the engine's). The prior cycles, the
    policy and the FR culprit ranks are the ones the engine decided with
    (`event.inputs`, a typed `DecisionInputs`), never re-read after the save; `policy`
    is used only for events that carry none. With `repo`, the
    artifact's path is saved with the cycle (`set_audit_path`). Each artifact is signed
    (`sign`): a digest, and an HMAC when there is a key.
    """

    def __init__(
        self,
        audit_dir: str | os.PathLike[str] | None = None,
        *,
        repo: Any = None,
        policy: PolicyConfig | None = None,
        hmac_key: bytes | None = None,
    ) -> None:
        self.audit_dir = Path(audit_dir) if audit_dir is not None else None
        if hmac_key is None:  # the key named by $RELAUNCH_AUDIT_HMAC_KEY_FILE, if any
            try:
                hmac_key = key_from_env()
            except KeyFileError as exc:  # unsigned artifacts fail `audit --hmac-key-file`
                log.error("audit artifacts will carry no HMAC: %s", exc)
        self.hmac_key = hmac_key
        self.repo = repo
        self.policy = policy or PolicyConfig()
        self.written = 0

    def __call__(self, event: VerdictEvent) -> None:
        self.write(event)

    def write(self, event: VerdictEvent) -> Path | None:
        """Write the artifact of `event`; its path (None without an audit folder)."""
        audit_dir = self.audit_dir or (Path(event.audit_dir) if event.audit_dir else None)
        if audit_dir is None:
            return None
        t0 = time.perf_counter()
        inputs = event.inputs
        fr: list[int] | None
        if inputs is not None:  # what the policy saw, as the engine decided
            history = list(inputs.prior_cycles)
            policy = inputs.policy
            fr = None if inputs.fr_culprit_ranks is None else list(inputs.fr_culprit_ranks)
            notes = [n.to_dict() for n in inputs.node_health]
        else:  # an event of a caller that saved the verdict itself: best effort
            history = []
            if self.repo is not None:
                prior = self.repo.prior_verdicts(event.job_id, event.cycle)
                history = [PriorCycle.from_verdict(c, v) for c, v in prior]
            policy, fr, notes = self.policy, None, []
            if self.repo is not None:
                rec = self.repo.get_cycle(event.job_id, event.cycle)
                ranks = FRFindings.from_dict(rec.fr_findings).culprit_ranks if rec else None
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
            node_health=notes or [n.to_dict() for n in event.verdict.node_health],
        )
        path = artifact_path(audit_dir, event.job_id, event.cycle)
        doc["timings"]["audit_ms"] = round((time.perf_counter() - t0) * 1000.0, 3)
        write_artifact(sign(doc, self.hmac_key), path)
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
    recomputed: Verdict | None = None
    hmac: str = "absent"  # "verified", "not checked" (no key given) or "absent"

    def to_dict(self) -> dict[str, Any]:
        return {
            "artifact": self.path,
            "ok": self.ok,
            "input_ok": self.input_ok,
            "hmac": self.hmac,
            "differences": self.differences,
            "recomputed_decision": str(self.recomputed.decision) if self.recomputed else None,
            "recomputed_rule": str(self.recomputed.rule) if self.recomputed else None,
        }


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object with each key once: a duplicate is refused (parsers disagree on which of
    two values counts, so a verifier and a reader could see different documents)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:80]!r}")
        if _has_surrogate(key):
            raise ValueError("a key holds a lone surrogate (not UTF-8)")
        if isinstance(value, str) and _has_surrogate(value):
            raise ValueError(f"the value of {key[:80]!r} holds a lone surrogate (not UTF-8)")
        out[key] = value
    return out


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _canonical_float(text: str) -> float:
    """A float written as the writer writes it (`repr`): other spellings of a number
    (`1.50`, `1e2`, 30 digits that round) are refused, the text is what was signed."""
    value = float(text)
    if not math.isfinite(value) or json.dumps(value) != text:
        raise ValueError(f"non-canonical number {text[:40]!r}")
    return value


def _canonical_int(text: str) -> int:
    if len(text) > 20 or str(int(text)) != text:
        raise ValueError(f"non-canonical integer {text[:40]!r}")
    return int(text)


def parse_strict(text: str) -> Any:
    """JSON as an audit artifact must be: each key once per object, numbers spelled as
    the writer spells them, no NaN/Infinity, no lone surrogates. ValueError otherwise."""
    return json.loads(
        text,
        object_pairs_hook=_unique_keys,
        parse_float=_canonical_float,
        parse_int=_canonical_int,
        parse_constant=_reject_constant,
    )


def load_artifact(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = read_regular(path, MAX_ARTIFACT_BYTES)
    except FileNotFoundError:
        raise AuditFormatError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise AuditFormatError(f"is a directory: {path}") from None
    except PermissionError:
        raise AuditFormatError(f"not readable: {path}") from None
    except OSError as exc:
        raise AuditFormatError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise AuditFormatError(f"{path}: {exc}") from None
    try:
        doc = parse_strict(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise AuditFormatError(f"not a JSON audit artifact: {path} ({exc})") from None
    except RecursionError:
        raise AuditFormatError(f"not an audit artifact: {path} (JSON nested too deep)") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("relaunch.audit/"):
        raise AuditFormatError(f"not a relaunch audit artifact (no schema): {path}")
    if doc.get("schema") != SCHEMA:
        raise AuditFormatError(
            f"unsupported audit schema {str(doc.get('schema'))[:40]!r} (this version reads {SCHEMA})"
        )
    _check_shape(doc, path)
    return doc


# The recorded inputs' shapes: what `recheck` feeds back to the policy must be what the
# writer wrote, or the artifact is unusable (AuditFormatError), never a crash.
_INT_LIMIT = 1 << 63
_PRIOR_TYPES: dict[str, tuple[type, ...]] = {
    "cycle": (int,),
    "decision": (str, type(None)),
    "fingerprint": (str, type(None)),
    "failure_class": (str, type(None)),
    "domain": (str, type(None)),
    "last_iteration": (int, type(None)),
    "last_checkpoint": (str, type(None)),
    "progress_known": (bool,),
    "entity": (str, type(None)),
    "checkpoint_iteration": (int, type(None)),
    "recoverability": (str, type(None)),
}


def _bad(path: Any, what: str) -> AuditFormatError:
    return AuditFormatError(f"not a usable audit artifact: {path}: {what}")


def _is_int(v: Any, lo: int = -_INT_LIMIT, hi: int = _INT_LIMIT) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _check_shape(doc: dict[str, Any], path: Any) -> None:
    inputs, verdict = doc.get("inputs"), doc.get("verdict")
    for key, value in (("inputs", inputs), ("verdict", verdict)):
        if not isinstance(value, dict):
            raise AuditFormatError(f"audit artifact lacks {key!r}: {path}")
    assert isinstance(inputs, dict) and isinstance(verdict, dict)
    log_in = inputs.get("log")
    if not isinstance(log_in, dict):
        raise _bad(path, "inputs.log is not an object")
    if not isinstance(log_in.get("path"), str) or not log_in["path"]:
        raise _bad(path, "inputs.log.path is not a path")
    if log_in.get("size") is not None and not _is_int(log_in["size"], 0):
        raise _bad(path, "inputs.log.size is not a byte count")
    if log_in.get("sha256") is not None and not isinstance(log_in["sha256"], str):
        raise _bad(path, "inputs.log.sha256 is not a string")
    history = inputs.get("history") or []
    if not isinstance(history, list):
        raise _bad(path, "inputs.history is not a list")
    for h in history:
        if not isinstance(h, dict):
            raise _bad(path, "inputs.history holds a non-object")
        for name, types in _PRIOR_TYPES.items():
            if name in h and not (isinstance(h[name], types) and _bounded(h[name])):
                raise _bad(path, f"inputs.history[].{name} has the wrong type")
        if "cycle" not in h:
            raise _bad(path, "inputs.history[] lacks its cycle")
    policy = inputs.get("policy") or {}
    if not isinstance(policy, dict):
        raise _bad(path, "inputs.policy is not an object")
    known = {f.name for f in fields(PolicyConfig)}
    for name, value in policy.items():
        number = _is_int(value, 0, 1 << 31) or (
            isinstance(value, float) and math.isfinite(value) and 0 <= value <= 1 << 31
        )
        if name in known and not number:
            raise _bad(path, f"inputs.policy.{name} is not a small non-negative number")
    fr = inputs.get("fr_culprit_ranks")
    if fr is not None and not (isinstance(fr, list) and all(_is_int(r, 0, 1 << 31) for r in fr)):
        raise _bad(path, "inputs.fr_culprit_ranks is not a list of ranks")
    nodes = inputs.get("node_health") or []
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise _bad(path, "bad recorded node_health (not a list of objects)")
    if not isinstance(verdict.get("scan", {}), dict):
        raise _bad(path, "verdict.scan is not an object")
    integrity = doc.get("integrity", {})
    if not isinstance(integrity, dict) or not all(isinstance(v, str) for v in integrity.values()):
        raise _bad(path, "integrity is not an object of strings")


def _bounded(v: Any) -> bool:
    return not isinstance(v, int) or isinstance(v, bool) or -_INT_LIMIT <= v <= _INT_LIMIT


def _policy(d: dict[str, Any]) -> PolicyConfig:
    known = {f.name for f in fields(PolicyConfig)}
    return PolicyConfig(**{k: v for k, v in (d or {}).items() if k in known})


def _prior(d: dict[str, Any]) -> PriorCycle:
    known = {f.name for f in fields(PriorCycle)}
    return PriorCycle(**{k: v for k, v in d.items() if k in known})


def _integrity_diffs(
    doc: dict[str, Any], hmac_key: bytes | None
) -> tuple[list[dict[str, Any]], str]:
    """Differences in the artifact's own integrity, and the HMAC state."""
    integrity = doc.get("integrity") or {}
    diffs: list[dict[str, Any]] = []
    digest = digest_of(doc)
    if not integrity.get("digest"):
        diffs.append({"field": "integrity.digest", "recorded": None, "now": digest})
    elif not hmac.compare_digest(str(integrity["digest"]), digest):
        diffs.append({"field": "integrity.digest", "recorded": integrity["digest"], "now": digest})
    recorded_mac = integrity.get("hmac")
    if hmac_key is None:
        return diffs, "not checked" if recorded_mac else "absent"
    mac = hmac_of(doc, hmac_key)
    if not recorded_mac or not hmac.compare_digest(str(recorded_mac), mac):
        shown = "(does not match the key)" if recorded_mac else None
        diffs.append({"field": "integrity.hmac", "recorded": shown, "now": "(the key's HMAC)"})
        return diffs, "mismatch"
    return diffs, "verified"


def _copies_diffs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The top-level copies (decision, rule, ...) must say what the verdict says."""
    v = doc["verdict"]
    primary = v.get("primary") if isinstance(v.get("primary"), dict) else {}
    pairs = {
        "decision": v.get("decision"),
        "rule": v.get("rule"),
        "basis": v.get("basis"),
        "fingerprint": primary.get("fingerprint"),
        "failure_class": primary.get("failure_class"),
        "evidence": v.get("evidence") or [],
        "progress": v.get("progress"),
        "history_counts": v.get("history"),
        "budgets": v.get("budgets"),
    }
    return [
        {"field": key, "recorded": doc.get(key), "now": want}
        for key, want in pairs.items()
        if _norm(doc.get(key)) != _norm(want)
    ]


def _scan_log(log_path: str, scanner: Any, limit: int | None = None) -> tuple[int, str]:
    """Hash and scan the recorded log in one pass over one descriptor (regular file only);
    with `limit`, its first `limit` bytes only (the verdict's scan stopped at its budget)."""
    h, size = hashlib.sha256(), 0
    fd = open_regular(log_path)
    with os.fdopen(fd, "rb", buffering=0) as fh:
        while chunk := fh.read(_CHUNK if limit is None else min(_CHUNK, limit - size)):
            h.update(chunk)
            scanner.feed(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def recheck(path: str | os.PathLike[str], hmac_key: bytes | None = None) -> RecheckResult:
    """Verify an artifact's integrity, recompute its verdict from the recorded inputs and
    list every difference (see the module docstring)."""
    from relaunch.restart_agent import decide
    from relaunch.restart_agent.budget import AnalysisBudget
    from relaunch.restart_agent.scanner import LogScanner

    doc = load_artifact(path)
    inputs = doc["inputs"]
    recorded = doc["verdict"]
    log_in = inputs["log"]
    log_path = log_in["path"]
    diffs, mac_state = _integrity_diffs(doc, hmac_key)
    diffs += _copies_diffs(doc)
    # a scan stopped at its budget is recomputed on the bytes it read, with no budget
    scanner = LogScanner(budget=AnalysisBudget.unlimited())
    stopped = (recorded.get("scan") or {}).get("budget")
    limit = stopped.get("bytes_read") if isinstance(stopped, dict) else None
    try:
        size, sha = _scan_log(
            log_path, scanner, limit if isinstance(limit, int) and limit >= 0 else None
        )
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        diffs.append({"field": "inputs.log", "recorded": log_path, "now": f"unreadable: {why}"})
        return RecheckResult(str(path), ok=False, input_ok=False, differences=diffs, hmac=mac_state)
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
    except (ValueError, AttributeError, TypeError) as exc:
        raise AuditFormatError(f"bad recorded inputs in {path}: {exc}") from None
    try:
        notes = [NodeHealthNote.from_dict(n) for n in inputs.get("node_health") or []]
    except (ValueError, AttributeError, TypeError) as exc:
        raise AuditFormatError(f"bad recorded node_health in {path}: {exc}") from None
    evidence = scanner.finish()
    if isinstance(stopped, dict):  # the same budget note as the recorded verdict's
        evidence = dataclasses.replace(evidence, budget=stopped)
    fr = inputs.get("fr_culprit_ranks")
    now = decide(evidence, history, policy, fr_culprit_ranks=fr, node_health=notes)
    verdict = now.to_dict()  # compared field by field with the artifact's JSON
    for key in COMPARED_KEYS:
        if (key in recorded or key in REQUIRED_KEYS) and _norm(recorded.get(key)) != _norm(
            verdict.get(key)
        ):
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
        str(path),
        ok=not diffs,
        input_ok=input_ok,
        differences=diffs,
        recomputed=now,
        hmac=mac_state,
    )


def _norm(value: Any) -> Any:
    """JSON round trip: tuples and lists, int keys and str keys compare as stored."""
    return json.loads(json.dumps(value, default=str))
