"""What an operator should do about a verdict: one sentence, shared by the dashboard's cycle
page and the MCP server's `explain_cycle` (so both always say the same thing)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relaunch.restart_agent.model import Decision


def next_step(
    decision: str | None,
    primary: Mapping[str, Any] | None,
    status: str,
    *,
    job_ended: bool | None = None,
) -> str:
    """The next step for a cycle with this verdict `decision`, primary evidence and status.

    `job_ended`: whether the job has ended (None: unknown). A cycle that ended, or whose
    job ended, without a verdict gets none by waiting: the advice says how to get one.
    """
    if status != "analysed" or decision is None:
        if status == "registered" and not job_ended:
            return "The cycle is still running; its verdict comes when it ends."
        return (
            "The cycle ended without a verdict (not analysed); none will come by waiting: "
            "analyse its log with `relaunch analyze LOG --db URL --job-id JOB --cycle N`."
        )
    fclass = (primary or {}).get("failure_class") or "the failure"
    line = (primary or {}).get("line")
    where = f" (log line {line})" if line else ""
    if decision == Decision.STOP:
        return (
            f"Do not restart: fix {fclass}{where} in the job's code, data or configuration, "
            "then launch again."
        )
    return (
        f"Restarting is expected to help ({fclass}{where}); no action needed unless the same "
        "fingerprint keeps recurring (search the history for it)."
    )
