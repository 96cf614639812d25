"""Grounding: every line the model cites must exist in the log and contain the quoted text.

A citation is grounded when its line number exists in the cycle log and the quote (with
whitespace runs collapsed) is a substring of that line, at least `MIN_QUOTE_CHARS` long.
A claim is grounded when it cites at least one line and all of its citations are grounded.
The answer is grounded when all of its claims are. Lines are read from the log itself by
number (streaming), not from what the prompt showed, so an answer cannot ground itself on
text it made up.
"""

from __future__ import annotations

import os
import re
from typing import Any

from relaunch.restart_agent.llm import logview
from relaunch.restart_agent.llm.schema import CLAIMS

MIN_QUOTE_CHARS = 4
_WS = re.compile(r"\s+")


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def check(
    answer: dict[str, Any], log_path: str | os.PathLike[str], shown: frozenset[int] = frozenset()
) -> dict[str, Any]:
    """Annotate a validated answer: each citation gets `grounded` (and `reason` when not).

    Returns {"claims": {claim: bool}, "grounded": bool, "answer": annotated copy}.
    """
    wanted = [
        c["line"]
        for claim in CLAIMS
        for c in answer[claim]["citations"]
        if isinstance(c["line"], int)
    ]
    text_of = logview.read_lines(log_path, wanted)
    annotated: dict[str, Any] = {}
    claims: dict[str, bool] = {}
    for claim in CLAIMS:
        part = dict(answer[claim])
        cites = []
        for c in part["citations"]:
            cite = {"line": c["line"], "quote": c["quote"], "shown": c["line"] in shown}
            reason = _ungrounded_reason(c, text_of)
            cite["grounded"] = reason is None
            if reason:
                cite["reason"] = reason
            cites.append(cite)
        part["citations"] = cites
        part["grounded"] = bool(cites) and all(c["grounded"] for c in cites)
        claims[claim] = part["grounded"]
        annotated[claim] = part
    annotated["deterministic_workload_bug"] = answer["deterministic_workload_bug"]
    return {"claims": claims, "grounded": all(claims.values()), "answer": annotated}


def _ungrounded_reason(cite: dict[str, Any], text_of: dict[int, str]) -> str | None:
    line, quote = cite["line"], _norm(cite["quote"])
    if line not in text_of:
        return "line does not exist in the log"
    if len(quote) < MIN_QUOTE_CHARS:
        return f"quote shorter than {MIN_QUOTE_CHARS} characters"
    if quote not in _norm(text_of[line]):
        return "quote is not in that line"
    return None
