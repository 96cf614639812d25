"""What an operator should do about a verdict: one sentence, shared by the dashboard's cycle
page and the MCP server's `explain_cycle` (so both always say the same thing)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def next_step(decision: str | None, primary: Mapping[str, Any] | None, status: str) -> str:
    """The next step for a cycle with this verdict `decision`, primary evidence and status."""
    if status != "analysed" or decision is None:
        return "The cycle is not analysed yet; ask again after it ends."
    fclass = (primary or {}).get("failure_class") or "the failure"
    line = (primary or {}).get("line")
    where = f" (log line {line})" if line else ""
    if decision == "STOP":
        return (
            f"Do not restart: fix {fclass}{where} in the job's code, data or configuration, "
            "then launch again."
        )
    return (
        f"Restarting is expected to help ({fclass}{where}); no action needed unless the same "
        "fingerprint keeps recurring (search the history for it)."
    )
