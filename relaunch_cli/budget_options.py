"""The analysis-budget options shared by `relaunch analyze` and `relaunch serve`.

`--budget-cpu-seconds S` and `--budget-kept-lines N` (0: no limit) set each analysis's
budget (restart_agent/budget.py); without them $RELAUNCH_ANALYSIS_CPU_SECONDS and
$RELAUNCH_ANALYSIS_MAX_KEPT, else the defaults. A variable that is not a number is a one-line
error (exit 2), as a bad option is.
"""

from __future__ import annotations

import argparse

from relaunch.cli.cli_args import bounded_float, bounded_int
from relaunch.cli.errors import UserError
from relaunch.restart_agent.budget import (
    CPU_ENV,
    DEFAULT_CPU_SECONDS,
    DEFAULT_MAX_KEPT,
    KEPT_ENV,
    AnalysisBudget,
)


def add_budget_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--budget-cpu-seconds",
        type=bounded_float(0, 10**7),
        metavar="S",
        help=(
            "CPU seconds one log's scan may spend; past them the verdict is made on what was"
            f" read and says so (0: no limit; default ${CPU_ENV} or {DEFAULT_CPU_SECONDS:g})"
        ),
    )
    p.add_argument(
        "--budget-kept-lines",
        type=bounded_int(0, 10**9),
        metavar="N",
        help=(
            "evidence lines one log's scan may keep in memory; then as --budget-cpu-seconds"
            f" (0: no limit; default ${KEPT_ENV} or {DEFAULT_MAX_KEPT})"
        ),
    )


def budget_from_args(args: argparse.Namespace) -> AnalysisBudget:
    """The budget the options (then the environment, then the defaults) give."""
    try:
        base = AnalysisBudget.from_env()
    except ValueError as exc:
        raise UserError(str(exc), 2) from None
    cpu, kept = base.cpu_seconds, base.max_kept
    if getattr(args, "budget_cpu_seconds", None) is not None:
        cpu = args.budget_cpu_seconds or None
    if getattr(args, "budget_kept_lines", None) is not None:
        kept = args.budget_kept_lines or None
    return AnalysisBudget(cpu, kept)
