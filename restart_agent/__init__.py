"""Restart agent: deterministic analysis of one cycle log into a STOP/RESTART verdict.

Pure analysis: log evidence, fingerprints, progress, policy, optional LLM enrichment.
It imports no web, database or launcher code.

Public API (stable; other packages use only these):

- `scan_file(path) -> CycleEvidence` and `LogScanner` (incremental: `feed(bytes)`, `finish()`)
- `decide(evidence, history, config=PolicyConfig(), fr_culprit_ranks=None, node_health=()) -> Verdict`
- `analyze_file(path, history=(), config=PolicyConfig(), fr_culprit_ranks=None) -> Verdict`
- the model types in `restart_agent.model`
"""

from relaunch.restart_agent.analyze import analyze_file
from relaunch.restart_agent.model import (
    CascadeGroup,
    CycleEvidence,
    Evidence,
    NodeHealthNote,
    PolicyConfig,
    PriorCycle,
    Progress,
    Verdict,
)
from relaunch.restart_agent.policy import decide
from relaunch.restart_agent.scanner import LogScanner, scan_file

__all__ = [
    "CascadeGroup",
    "CycleEvidence",
    "Evidence",
    "LogScanner",
    "NodeHealthNote",
    "PolicyConfig",
    "PriorCycle",
    "Progress",
    "Verdict",
    "analyze_file",
    "decide",
    "scan_file",
]
