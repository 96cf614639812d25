"""Optional LLM enrichment of a published verdict, through the `openai` SDK.

Off unless configured. The deterministic verdict is computed and published first; this
package then asks an OpenAI-compatible endpoint for a plain-language explanation, a
suggested owner (workload/infrastructure) and a recovery outlook, each citing log lines,
under a hard deadline. Answers are validated against a JSON schema and checked against
the log line by line (grounding). `apply_enrichment` may use a grounded answer only to
shorten a workload bug's retry budget, never to STOP an infrastructure failure.

- `LLMConfig`, `LLMConfigError` — settings (the key stays in its file)
- `enrich(verdict_dict, log_path, config) -> dict` — the enrichment record, never raises
- `apply_enrichment(verdict_dict, enrichment, policy) -> dict` — verdict with `llm` filled in
- `enrich_and_apply(verdict_dict, log_path, config, policy) -> dict` — both
"""

from __future__ import annotations

import os
from typing import Any

from relaunch.restart_agent.llm.config import LLMConfig, LLMConfigError
from relaunch.restart_agent.llm.enrich import enrich
from relaunch.restart_agent.llm.policy import apply_enrichment, llm_record
from relaunch.restart_agent.model import PolicyConfig, Verdict

__all__ = [
    "LLMConfig",
    "LLMConfigError",
    "apply_enrichment",
    "enrich",
    "enrich_and_apply",
    "format_text",
    "llm_record",
]


def enrich_and_apply(
    verdict: dict[str, Any],
    log_path: str | os.PathLike[str],
    config: LLMConfig,
    policy: PolicyConfig | None = None,
) -> dict[str, Any]:
    """Enrich `verdict` and return a copy with its `llm` object (and any allowed STOP)."""
    return apply_enrichment(verdict, enrich(verdict, log_path, config), policy)


def format_text(verdict: dict[str, Any]) -> str:
    """Human-readable lines for a verdict's `llm` object (for `relaunch analyze --llm`)."""
    v = Verdict.read(verdict)  # the JSON form, read once
    llm = v.llm if v is not None else None
    if llm is None or llm.status is None:
        return "llm: not run"
    tokens = llm.tokens if isinstance(llm.tokens, dict) else {}
    head = (
        f"llm: {llm.model} {llm.latency_ms} ms, tokens {tokens.get('prompt')}/"
        f"{tokens.get('completion')}, grounded={'yes' if llm.grounded else 'no'}, "
        f"contributed={'yes' if llm.contributed else 'no'}"
    )
    lines = [head]
    if llm.error:
        lines.append(f"  error: {llm.error}")
    if llm.contributed:
        lines.append(f"  how: {llm.how}")
    elif llm.not_used_because:
        lines.append(f"  not used: {llm.not_used_because}")
    if llm.explanation:
        lines.append(f"  explanation: {llm.explanation}")
    if llm.owner:
        lines.append(f"  suggested owner: {llm.owner}")
    if llm.recovery_outlook:
        lines.append(
            f"  recovery outlook: {llm.recovery_outlook} — {llm.recovery_text or ''}".rstrip(" —")
        )
    for name, cites in (llm.citations if isinstance(llm.citations, dict) else {}).items():
        for c in cites:
            mark = "ok" if c.get("grounded") else f"UNGROUNDED ({c.get('reason')})"
            lines.append(f"  cite {name}: line {c.get('line')} {c.get('quote')!r} [{mark}]")
    return "\n".join(lines)
