"""`relaunch audit FILE...`: re-check audit artifacts against their recorded inputs.

Recomputes each verdict from the recorded log (size and sha256 checked first), prior
cycles, policy budgets and FR culprit ranks, and reports any difference.
Exit codes: 0 every artifact re-checks identical, 1 a difference (or a changed input),
2 a file that is not a readable audit artifact.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from relaunch_cli.cli_args import ArgumentParser
from relaunch_cli.errors import UserError

EXIT_DIFFERENCE = 1


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Re-check audit artifacts: recompute each verdict from its recorded inputs.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="audit JSON artifact(s)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    return p


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run(args: argparse.Namespace) -> int:
    from attribution.audit import AuditFormatError, recheck

    results = []
    for path in args.files:
        try:
            results.append(recheck(path))
        except AuditFormatError as exc:
            raise UserError(str(exc)) from None
    if args.format == "json":
        out: Any = [r.to_dict() for r in results]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2, default=str))
    else:
        for r in results:
            if r.ok:
                rc = r.recomputed or {}
                print(f"OK {r.path}: recomputed {rc.get('decision')} ({rc.get('rule')}) matches")
                continue
            print(f"DIFFERENT {r.path}: {len(r.differences)} difference(s)")
            if not r.input_ok:
                print("  the recorded input changed since the verdict:")
            for d in r.differences:
                print(f"  {d['field']}: recorded {_short(d['recorded'])}")
                print(f"  {' ' * len(d['field'])}  now      {_short(d['now'])}")
    return 0 if all(r.ok for r in results) else EXIT_DIFFERENCE
