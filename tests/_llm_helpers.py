"""Shared pieces of the LLM tests: a cycle log, a verdict of it, scripted model answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from relaunch.restart_agent.llm import LLMConfig
from relaunch.restart_agent.model import Budgets, CascadeGroup, Evidence, History, Progress, Verdict
from tests._llm_server import LLMServer

KEY = "sk-test-7f3c9a2e4b1d8f6a0c5e9b3d7a1f4c8e"
PRIMARY_TEXT = "ValueError: hidden_size 1000 is not divisible by num_attention_heads 16"
SHORTENABLE_RULE = "restart.workload_first"  # restart_agent/policy.py


def write_log(directory: Path, *, before: int = 150, after: int = 40) -> tuple[Path, int]:
    """A cycle log: `before` progress lines, a ValueError traceback on rank 0, cascades.

    Returns (path, line number of the ValueError line).
    """
    lines = [
        f"[rank{i % 4}]: iteration {i // 4 + 1} | lm loss 2.{i % 97:02d} | lr 3e-4"
        for i in range(before)
    ]
    lines += [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/workspace/train.py", line 88, in <module>',
        "[rank0]:     model = build_model(cfg)",
        '[rank0]:   File "/workspace/model.py", line 12, in build_model',
        "[rank0]:     raise ValueError(msg)",
        f"[rank0]: {PRIMARY_TEXT}",
    ]
    primary_line = len(lines)
    lines += [
        f"[rank{1 + i % 3}]: [E ProcessGroupNCCL.cpp:1234] Watchdog caught collective operation timeout"
        for i in range(after)
    ]
    path = directory / "cycle-1.log"
    path.write_text("\n".join(lines) + "\n")
    return path, primary_line


def make_verdict(
    primary_line: int,
    *,
    decision: str = "RESTART",
    rule: str = SHORTENABLE_RULE,
    domain: str = "workload",
    failure_class: str = "python_value_error",
    same_root: int = 0,
    recoverability: str = "probable",
    extra_evidence: list[Evidence] | None = None,
) -> dict[str, Any]:
    primary = Evidence(
        line=primary_line,
        rank=0,
        pattern_id="python.exception",
        failure_class=failure_class,
        domain=domain,  # type: ignore[arg-type]
        role="root",
        recoverability=recoverability,
        text=PRIMARY_TEXT,
        fingerprint=f"{failure_class}:hidden_size N is not divisible by num_attention_heads N",
    )
    cascade = CascadeGroup(
        failure_class="nccl_watchdog_timeout",
        role="cascade",
        count=40,
        ranks=[1, 2, 3],
        first_line=primary_line + 1,
        example="[E ProcessGroupNCCL.cpp:1234] Watchdog caught collective operation timeout",
    )
    verdict = Verdict(
        decision=decision,  # type: ignore[arg-type]
        basis="A probable workload bug; restart once to see whether it recurs identically.",
        rule=rule,
        primary=primary,
        cascades=[cascade],
        progress=Progress(
            known=True, last_iteration=38, first_iteration=1, dialect="megatron", line=150
        ),
        history=History.from_dict(
            {"same_root_prior_cycles": same_root, "consecutive_no_progress": 0}
        ),
        budgets=Budgets.from_dict({"workload_recurrence_stop": 1}),
        evidence=[primary, *(extra_evidence or [])],
    )
    return verdict.to_dict()


def answer(
    line: int,
    quote: str = "is not divisible by num_attention_heads",
    *,
    owner: str = "workload",
    outlook: str = "will_not_recover",
    bug: bool = True,
    explanation_line: int | None = None,
) -> str:
    cite = [{"line": line, "quote": quote}]
    return json.dumps(
        {
            "explanation": {
                "text": "The model config is invalid: hidden_size must be a multiple of the head count.",
                "citations": [{"line": explanation_line or line, "quote": quote}],
            },
            "owner": {"value": owner, "citations": cite},
            "recovery_outlook": {
                "value": outlook,
                "text": "The same config fails the same way on every restart.",
                "citations": cite,
            },
            "deterministic_workload_bug": bug,
        }
    )


def config(server: LLMServer, model: str, key_file: Path | None, **kw: Any) -> LLMConfig:
    return LLMConfig(
        base_url=server.base_url,
        model=model,
        api_key_file=str(key_file) if key_file else None,
        **kw,
    )
