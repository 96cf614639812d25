"""Helpers for the storage/engine/analyze tests: database URLs and small verdict dicts.

`sqlite_url(tmp_path)` gives a fresh SQLite file URL; `pg_url_or_skip()` gives the
PostgreSQL URL from RELAUNCH_TEST_PG_URL with an emptied schema, or skips with the reason.
`verdict(...)` builds a verdict dict of the shape `Verdict.to_dict()` returns.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def sqlite_url(tmp_path: Path, name: str = "relaunch.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def pg_url_or_skip() -> str:
    url = os.environ.get("RELAUNCH_TEST_PG_URL")
    if not url:
        pytest.skip("RELAUNCH_TEST_PG_URL is not set (no PostgreSQL server for this run)")
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 is not installed (pip install 'relaunch[postgres]')")
    from sqlalchemy import create_engine, text

    from relaunch.storage.models import Base

    engine = create_engine(url)
    tables = [t.name for t in reversed(Base.metadata.sorted_tables)] + ["alembic_version"]
    try:
        with engine.begin() as conn:
            for table in tables:  # every table the models know: a fresh database per test
                conn.execute(text(f"DROP TABLE IF EXISTS {table} CASCADE"))
    except Exception as exc:  # noqa: BLE001 - any connection failure means PostgreSQL is unreachable
        pytest.skip(f"PostgreSQL at RELAUNCH_TEST_PG_URL is unreachable: {exc}")
    finally:
        engine.dispose()
    return url


def verdict(
    decision: str = "RESTART",
    *,
    rule: str = "default_restart",
    fingerprint: str | None = "cuda_oom:CUDA out of memory",
    failure_class: str | None = "cuda_oom",
    domain: str | None = "workload",
    line: int = 10,
    last_iteration: int | None = None,
    evidence_lines: tuple[int, ...] = (10, 12),
) -> dict[str, Any]:
    primary = None
    if fingerprint is not None:
        primary = {
            "line": line,
            "rank": 3,
            "pattern_id": failure_class,
            "failure_class": failure_class,
            "domain": domain,
            "role": "root",
            "recoverability": "retry",
            "text": f"error at line {line}",
            "fingerprint": fingerprint,
            "entity": None,
            "node": None,
        }
    evidence = [{**(primary or {}), "line": n, "text": f"evidence {n}"} for n in evidence_lines]
    return {
        "decision": decision,
        "basis": f"{decision} because of a test",
        "rule": rule,
        "primary": primary,
        "cascades": [],
        "progress": {
            "known": last_iteration is not None,
            "last_iteration": last_iteration,
            "first_iteration": None,
            "last_checkpoint": None,
            "checkpoint_iteration": None,
            "dialect": None,
            "line": None,
        },
        "history": {"same_root_prior_cycles": 0},
        "budgets": {},
        "evidence": evidence,
        "fan_out": {},
        "fr": None,
        "llm": {"contributed": False},
        "scan": {},
    }


# -- small realistic multi-rank cycle logs -------------------------------------------------


def _progress(ranks: int, start: int, stop: int) -> list[str]:
    lines = []
    for it in range(start, stop + 1, 10):
        lines.append(
            f"[rank0]:  iteration {it:>8}/  500000 | consumed samples: {it * 64:>10} | "
            f"elapsed time per iteration (ms): 812.3 | lm loss: 2.345E+00 |"
        )
        for r in range(1, ranks):
            lines.append(f"[rank{r}]: step done, tokens/s=51234")
    return lines


def infra_log(last_iteration: int = 100, ranks: int = 4, failing_rank: int = 2) -> str:
    """A NCCL system error on one rank, then watchdog timeouts and teardown on the others."""
    lines = [f"[rank{r}]: initializing model parallel with size 1" for r in range(ranks)]
    lines += _progress(ranks, last_iteration - 20, last_iteration)
    lines.append(
        f"[rank{failing_rank}]: torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5"
    )
    for r in range(ranks):
        if r != failing_rank:
            lines.append(
                f"[rank{r}]: [E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective "
                f"operation timeout: WorkNCCL(SeqNum=4{r}1, OpType=ALLREDUCE, NumelIn=1, "
                f"NumelOut=1, Timeout(ms)=600000) ran for 600{r}45 milliseconds before timing out."
            )
    lines.append("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")
    return "\n".join(lines) + "\n"


def workload_log(last_iteration: int = 50, ranks: int = 4) -> str:
    """A KeyError traceback on every rank after some progress (a probable workload bug)."""
    lines = _progress(ranks, max(0, last_iteration - 20), last_iteration)
    for r in range(ranks):
        lines += [
            f"[rank{r}]: Traceback (most recent call last):",
            f'[rank{r}]:   File "/work/train.py", line 88, in <module>',
            f"[rank{r}]:     batch = sample['input_ids']",
            f"[rank{r}]: KeyError: 'input_ids'",
        ]
    return "\n".join(lines) + "\n"


def syntax_log(ranks: int = 2) -> str:
    """A SyntaxError on every rank before any progress (a certain workload bug)."""
    lines = []
    for r in range(ranks):
        lines += [
            f"[rank{r}]: Traceback (most recent call last):",
            f'[rank{r}]:   File "/work/train.py", line 12',
            f"[rank{r}]:     def forward(self x):",
            f"[rank{r}]:                      ^",
            f"[rank{r}]: SyntaxError: invalid syntax",
        ]
    return "\n".join(lines) + "\n"
