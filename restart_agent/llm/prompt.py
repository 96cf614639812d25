"""The bounded model view: what the prompt may carry, inside a token budget.

The model sees the deterministic verdict's summary (decision, rule, primary evidence,
folded cascades, progress, history) and a numbered window of log lines around the
primary evidence — read by line number from the log, never the whole log.

Token budget: tokens are estimated as `ceil(chars / 4)` (a conservative rule of thumb for
English and log text with BPE tokenizers). Of the configured context size, `output_tokens`
(a quarter, at most 1024) are reserved for the answer and 10% for message framing; the rest
is the prompt budget. The window starts at `WINDOW_BEFORE` lines before and `WINDOW_AFTER`
after the primary and is shrunk until the whole prompt fits; cascades are cut to the largest
`MAX_CASCADES` groups and long texts are clipped first.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from relaunch.restart_agent.llm import logview

WINDOW_BEFORE = 60
WINDOW_AFTER = 30
MAX_CASCADES = 8
MAX_LINE_CHARS = 300
MAX_EVIDENCE = 12
MIN_WINDOW = 11  # window lines kept before the summary is cut

SYSTEM_PROMPT = """\
You are a site reliability assistant for distributed PyTorch training jobs. A deterministic \
restart agent has already decided STOP or RESTART for one failed training cycle. You do not \
change that decision. You explain it for a person and give your assessment:
- explanation: what went wrong, in plain language (2-5 sentences);
- owner: "workload" if the user's code, config or data must change, "infrastructure" if the \
hardware, network, scheduler or node is at fault, "unknown" if the evidence does not say;
- recovery_outlook: "recovers_on_restart", "will_not_recover" or "uncertain", with one sentence why;
- deterministic_workload_bug: true only if the failure is a bug in the user's code or config \
that will happen again, identically, on every restart.
Every claim must cite log lines as {"line": N, "quote": "..."} where N is a line number shown \
in the LOG WINDOW or EVIDENCE and quote is an exact substring of that line. Never cite a line \
you were not shown. Answer with one JSON object matching the schema, nothing else."""


def estimate_tokens(text: str) -> int:
    """~4 characters per token, rounded up."""
    return math.ceil(len(text) / 4)


@dataclass(frozen=True)
class Budget:
    context_tokens: int
    output_tokens: int
    prompt_tokens: int

    @classmethod
    def from_context(cls, context_tokens: int) -> Budget:
        output = min(1024, context_tokens // 4)
        framing = context_tokens // 10
        return cls(context_tokens, output, context_tokens - output - framing)


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, str]]
    estimated_tokens: int
    window_lines: tuple[int, int] | None  # first and last line number shown
    shown_lines: frozenset[int]  # every line number the model was shown
    budget: Budget


def _clip(text: Any, limit: int = MAX_LINE_CHARS) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _summary(verdict: dict[str, Any], max_cascades: int, evidence_limit: int) -> dict[str, Any]:
    primary = verdict.get("primary") or None
    cascades = sorted(verdict.get("cascades") or [], key=lambda c: -int(c.get("count") or 0))[
        :max_cascades
    ]
    evidence = [
        {
            "line": e.get("line"),
            "rank": e.get("rank"),
            "class": e.get("failure_class"),
            "role": e.get("role"),
            "text": _clip(e.get("text")),
        }
        for e in (verdict.get("evidence") or [])[:evidence_limit]
        if isinstance(e, dict)
    ]
    return {
        "decision": verdict.get("decision"),
        "rule": verdict.get("rule"),
        "basis": _clip(verdict.get("basis"), 600),
        "primary": None
        if not primary
        else {
            "failure_class": primary.get("failure_class"),
            "domain": primary.get("domain"),
            "line": primary.get("line"),
            "rank": primary.get("rank"),
            "text": _clip(primary.get("text")),
            "entity": primary.get("entity"),
        },
        "cascades": [
            {
                "class": c.get("failure_class"),
                "role": c.get("role"),
                "count": c.get("count"),
                "ranks": _rank_span(c.get("ranks") or []),
                "first_line": c.get("first_line"),
                "example": _clip(c.get("example"), 200),
            }
            for c in cascades
        ],
        "cascade_groups_total": len(verdict.get("cascades") or []),
        "progress": verdict.get("progress") or {},
        "history": verdict.get("history") or {},
        "budgets": verdict.get("budgets") or {},
        "evidence": evidence,
    }


def _rank_span(ranks: list[int]) -> str:
    """Ranks as a short string: '0-3,7' (a 4096-rank list must not eat the budget)."""
    out: list[str] = []
    rs = sorted({int(r) for r in ranks if isinstance(r, int)})
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    text = ",".join(out)
    return _clip(text, 120)


def build(verdict: dict[str, Any], log_path: str | os.PathLike[str], context_tokens: int) -> Prompt:
    """Messages for one enrichment, fitted into the budget of `context_tokens`."""
    budget = Budget.from_context(context_tokens)
    primary = verdict.get("primary") or {}
    center = primary.get("line") if isinstance(primary.get("line"), int) else None
    lines, _ = logview.window(log_path, center, WINDOW_BEFORE, WINDOW_AFTER)
    system_tokens = estimate_tokens(SYSTEM_PROMPT)
    max_cascades, evidence_limit = MAX_CASCADES, MAX_EVIDENCE
    shown = list(lines)
    while True:
        summary = _summary(verdict, max_cascades, evidence_limit)
        user = _user_message(summary, shown)
        total = system_tokens + estimate_tokens(user)
        if total <= budget.prompt_tokens:
            break
        # shrink order: far window lines, then evidence and cascades, then the rest
        if len(shown) > MIN_WINDOW or (len(shown) > 1 and not (evidence_limit or max_cascades)):
            shown = _shrink(shown, center)
        elif evidence_limit or max_cascades:
            evidence_limit //= 2
            max_cascades //= 2
        elif shown:
            shown = []
        else:
            break  # verdict summary alone exceeds the budget: send it clipped as is
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
    numbers = frozenset(n for n, _ in shown) | frozenset(
        e["line"] for e in summary["evidence"] if isinstance(e.get("line"), int)
    )
    if summary["primary"] and isinstance(summary["primary"].get("line"), int):
        numbers |= {summary["primary"]["line"]}
    span = (shown[0][0], shown[-1][0]) if shown else None
    return Prompt(messages, total, span, numbers, budget)


def _shrink(shown: list[tuple[int, str]], center: int | None) -> list[tuple[int, str]]:
    """Drop a quarter of the window, farthest from the primary first.

    Lines after the primary count double distance: what led up to a failure explains it
    better than the teardown after it. Without a primary (tail window) the oldest go first.
    """
    k = max(1, len(shown) // 4)
    if center is None:
        return shown[k:]

    def cost(item: tuple[int, str]) -> int:
        d = item[0] - center
        return 2 * d if d > 0 else -d

    drop = {n for n, _ in sorted(shown, key=cost, reverse=True)[:k]}
    return [item for item in shown if item[0] not in drop]


def _user_message(summary: dict[str, Any], shown: list[tuple[int, str]]) -> str:
    parts = [
        "DETERMINISTIC VERDICT (already published; JSON):",
        json.dumps(summary, ensure_ascii=False, default=str),
        "",
    ]
    if shown:
        parts.append(f"LOG WINDOW (lines {shown[0][0]}-{shown[-1][0]}; format 'N| text'):")
        parts += [f"{n}| {_clip(t)}" for n, t in shown]
    else:
        parts.append("LOG WINDOW: (empty)")
    return "\n".join(parts)
