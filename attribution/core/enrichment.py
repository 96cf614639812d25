"""The LLM enrichment listener: asks the model after a verdict is saved, never before.

`EnrichmentListener(repo, config, policy)` is registered with
`AttributionEngine.add_listener`. The engine calls it on its listener thread; it only
queues the event and returns, so Slack, audit and export listeners are not held up
either. Its own worker thread runs `restart_agent.llm.enrich_and_apply` under the
config's hard timeout, then:

- saves the verdict's `llm` object with `repo.save_llm` (always, errors included);
- when the policy let a grounded answer shorten a workload bug's retry budget, replaces
  the stored verdict of that cycle with the STOP (keeping log identity and audit path) —
  but only if the stored verdict is still the one that was enriched;
- writes `cycle_<N>.llm.json` next to the cycle's audit artifact (`cycle_<N>.json`, see
  `attribution.core.audit`) when audit artifacts are written: the artifact stays the record of
  the deterministic verdict (what `relaunch audit` re-checks), the sidecar records what the
  LLM said and whether it contributed.

A failing model, server, database or disk is logged (without the API key) and dropped.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaunch.attribution.core.audit import artifact_path
from relaunch.attribution.core.background import BackgroundQueue
from relaunch.attribution.core.files import write_json_atomic
from relaunch.restart_agent.llm import LLMConfig, enrich_and_apply
from relaunch.restart_agent.model import PolicyConfig, Verdict
from relaunch.storage import HistoryRepository

if TYPE_CHECKING:
    from relaunch.attribution.core.engine import VerdictEvent


log = logging.getLogger(__name__)

ResultHook = Callable[["VerdictEvent", dict[str, Any]], object]


def audit_sidecar_path(audit_path: str | os.PathLike[str]) -> Path:
    """`<audit_dir>/<job>/cycle_<N>.llm.json` next to the artifact `cycle_<N>.json`."""
    p = Path(audit_path)
    return p.with_name(f"{p.stem}.llm.json")


class EnrichmentListener:
    """Engine listener that enriches each saved verdict in the background."""

    def __init__(
        self,
        repo: HistoryRepository | None,
        config: LLMConfig,
        policy: PolicyConfig | None = None,
        *,
        apply_policy: bool = True,
        audit_dir: str | os.PathLike[str] | None = None,
        max_pending: int = 64,
        on_result: ResultHook | None = None,
    ) -> None:
        self.repo = repo
        self.config = config
        self.policy = policy or PolicyConfig()
        self.apply_policy = apply_policy
        self.audit_dir = audit_dir
        self.on_result = on_result
        self._work: BackgroundQueue[Any] = BackgroundQueue(
            self._handle_logged, name="relaunch-llm-enrichment", maxsize=max(1, max_pending)
        )

    def __repr__(self) -> str:
        return f"EnrichmentListener(model={self.config.model!r}, timeout_s={self.config.timeout_s})"

    def __call__(self, event: VerdictEvent) -> None:
        """Queue `event` (a `VerdictEvent`) and return at once."""
        if not self._work.put(event) and not self._work.closed:
            log.warning(
                "LLM enrichment skipped for job %s cycle %s: %d enrichments already pending",
                getattr(event, "job_id", "?"),
                getattr(event, "cycle", "?"),
                self._work.maxsize,
            )

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued enrichment is done; False on timeout."""
        return self._work.drain(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Finish queued work (up to `timeout`, default the LLM timeout + 5 s) and stop."""
        self.drain(self.config.timeout_s + 5 if timeout is None else timeout)
        self._work.close(1.0)

    def _handle_logged(self, event: VerdictEvent) -> None:
        try:
            self._handle(event)
        except Exception as exc:  # noqa: BLE001 - an enrichment failure never costs the stored verdict
            # messages from our own code and storage; the key never reaches them
            log.error(
                "LLM enrichment of job %s cycle %s failed: %s: %s",
                getattr(event, "job_id", "?"),
                getattr(event, "cycle", "?"),
                type(exc).__name__,
                exc,
            )

    def _handle(self, event: VerdictEvent) -> None:
        # the LLM layer (restart_agent.llm) reads and rewrites the stored JSON form: its
        # answer is read back once, here
        answer = enrich_and_apply(event.verdict.to_dict(), event.log_path, self.config, self.policy)
        result = Verdict.from_dict(answer)
        contributed = result.llm.contributed and self.apply_policy
        if not self.apply_policy and result.llm.contributed:
            result = dataclasses.replace(
                event.verdict,
                llm=result.llm.with_(
                    contributed=False, not_used_because="policy use is switched off"
                ),
            )
        record = None
        if self.repo is not None:
            record = self.repo.get_cycle(event.job_id, event.cycle)
            if contributed:
                result = self._replace_verdict(event, result, record)
            self.repo.save_llm(event.job_id, event.cycle, result.llm.to_dict())
        audit_path = record.audit_path if record is not None else None
        audit_dir = self.audit_dir or getattr(event, "audit_dir", None)
        if audit_path is None and audit_dir:
            audit_path = os.fspath(artifact_path(audit_dir, event.job_id, event.cycle))
        if audit_path:
            self._write_sidecar(audit_sidecar_path(audit_path), event, result)
        if self.on_result is not None:
            self.on_result(event, result.to_dict())

    def _replace_verdict(self, event: VerdictEvent, result: Verdict, record: Any) -> Verdict:
        """Store `result` in place of the verdict it enriched; when the stored one changed
        meanwhile, `result` comes back with the LLM's contribution withdrawn."""
        assert self.repo is not None
        stored = Verdict.read(record.verdict) if record else None
        if stored is None or _identity(stored) != _identity(event.verdict):
            log.warning(
                "LLM enrichment of job %s cycle %s not applied: the stored verdict changed meanwhile",
                event.job_id,
                event.cycle,
            )
            why = "the stored verdict changed meanwhile"
            return dataclasses.replace(
                result, llm=result.llm.with_(contributed=False, not_used_because=why)
            )
        self.repo.save_verdict(
            event.job_id,
            event.cycle,
            result.to_dict(),
            log_identity=getattr(event, "log_identity", None)
            or (record.log_identity if record else None),
            audit_path=record.audit_path if record else None,
        )
        return result

    def _write_sidecar(self, path: Path, event: VerdictEvent, result: Verdict) -> None:
        payload = {
            "job_id": event.job_id,
            "cycle": event.cycle,
            "log_path": event.log_path,
            "deterministic": {
                "decision": str(event.verdict.decision),
                "rule": str(event.verdict.rule),
                "basis": event.verdict.basis,
            },
            "final": {
                "decision": str(result.decision),
                "rule": str(result.rule),
                "basis": result.basis,
            },
            "llm": result.llm.to_dict(),
            "llm_config": self.config.describe(),
        }
        write_json_atomic(path, payload, sort_keys=True)


def _identity(verdict: Verdict) -> tuple[Any, ...]:
    primary = verdict.primary
    return (
        str(verdict.decision),
        str(verdict.rule),
        primary.fingerprint if primary else None,
        primary.line if primary else None,
        # a re-decision that added a node's health report is a different verdict too
        tuple(sorted(n.node for n in verdict.node_health)),
    )
