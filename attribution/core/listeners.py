"""The engine's listeners, built in one place for every caller.

`install_listeners(engine, ...)` builds the listeners a caller asked for and registers
them with the engine, in one order (audit artifacts, webhook export, Slack, LLM
enrichment), each with the engine's repository, policy and audit folder, so the service
(`relaunch serve`) and the launcher's embedded client wire them the same way. It returns
them, for `close()` and stats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from relaunch.attribution.core.engine import AttributionEngine, Listener, VerdictEvent
    from relaunch.restart_agent.llm.config import LLMConfig

ResultHook = Callable[["VerdictEvent", dict[str, Any]], Any]
AlertCheck = Callable[[str, str], bool]  # (job_id, alert key) -> bool


class AlertListener(Protocol):
    """A listener that dedups alerts in a store (`attribution.notify.slack.SlackNotifier`;
    core may not import notify, so the shape is named here)."""

    def __call__(self, event: VerdictEvent) -> None: ...

    def use_store(self, recorded: AlertCheck, record: AlertCheck) -> None: ...


def install_listeners(
    engine: AttributionEngine,
    *,
    audit: bool = False,
    webhook_url: str | None = None,
    slack: AlertListener | None = None,
    llm_config: LLMConfig | None = None,
    on_llm_result: ResultHook | None = None,
) -> list[Listener]:
    """Build the configured listeners, register them with `engine`, return them.

    `audit`: write an audit artifact per verdict under `engine.audit_dir` (needs one).
    `slack`: a ready `SlackNotifier` (its alert dedup uses the engine's repository).
    `llm_config`: enrich each verdict with the LLM (`EnrichmentListener`), calling
    `on_llm_result(event, result)` after each answer.
    """
    listeners: list[Listener] = []
    repo, policy = engine.repo, engine.policy
    if audit and engine.audit_dir is not None:
        from relaunch.attribution.core.audit import AuditWriter

        listeners.append(AuditWriter(engine.audit_dir, repo=repo, policy=policy))
    if webhook_url:
        from relaunch.attribution.core.export import WebhookExporter

        listeners.append(WebhookExporter(webhook_url))
    if slack is not None:
        if repo is not None:  # dedup survives a restart
            slack.use_store(repo.alert_recorded, repo.record_alert)
        listeners.append(slack)
    if llm_config is not None:
        from relaunch.attribution.core.enrichment import EnrichmentListener

        listeners.append(
            EnrichmentListener(
                repo,
                llm_config,
                policy,
                audit_dir=engine.audit_dir,
                on_result=on_llm_result,
            )
        )
    for fn in listeners:
        engine.add_listener(fn)
    return listeners


def close_listeners(listeners: list[Listener], on_error: Callable[[Listener], None]) -> None:
    """Call each listener's `close()` if it has one; `on_error(fn)` when one fails."""
    for fn in listeners:
        close = getattr(fn, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 - a listener's shutdown must not stop the others'
                on_error(fn)
