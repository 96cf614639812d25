"""`relaunch audit FILE...`: re-check audit artifacts against their recorded inputs.

Verifies each artifact's digest (and, with `--hmac-key-file`, its HMAC), checks that its
top-level copies (decision, rule, basis, fingerprint, failure class, evidence) say what its
verdict says, then recomputes the verdict from the recorded log (size and sha256 checked
first), prior cycles, policy budgets and FR culprit ranks, and reports any difference.
Exit codes: 0 every artifact verifies and re-checks identical; 1 a difference: tampered or
unsigned artifact, HMAC mismatch, changed or unreadable input, different recomputation;
2 unusable input: a file that is not a readable audit artifact (not a regular file, not
JSON, wrong shape), an unusable key file, or a usage error (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from relaunch.attribution.core.terminal import safe_text
from relaunch.cli.cli_args import ArgumentParser
from relaunch.cli.errors import UserError

EXIT_DIFFERENCE = 1


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Re-check audit artifacts: verify their digest/HMAC and recompute each "
        "verdict from its recorded inputs.",
        epilog="exit codes: 0 all OK, 1 a difference (tampered, changed input, different "
        "verdict), 2 unusable input.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="audit JSON artifact(s)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument(
        "--hmac-key-file",
        metavar="FILE",
        help="verify each artifact's HMAC with the key in FILE (first line); an artifact "
        "without a matching HMAC is a difference",
    )
    return p


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run(args: argparse.Namespace) -> int:
    from relaunch.attribution.core.audit import (
        AuditFormatError,
        KeyFileError,
        read_key_file,
        recheck,
    )

    key = None
    if args.hmac_key_file:
        try:
            key = read_key_file(args.hmac_key_file)
        except KeyFileError as exc:
            raise UserError(str(exc)) from None
    results = []
    for path in args.files:
        try:
            results.append(recheck(path, hmac_key=key))
        except AuditFormatError as exc:
            raise UserError(str(exc)) from None
    if args.format == "json":
        out: Any = [r.to_dict() for r in results]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2, default=str))
    else:
        lines: list[str] = []
        for r in results:
            mac = {"verified": "HMAC verified", "not checked": "HMAC not checked (no key)"}.get(
                r.hmac, "no HMAC"
            )
            if r.ok:
                rc = r.recomputed
                lines.append(
                    f"OK {r.path}: recomputed {rc and rc.decision} ({rc and rc.rule}) "
                    f"matches; digest verified; {mac}"
                )
                continue
            lines.append(f"DIFFERENT {r.path}: {len(r.differences)} difference(s)")
            if not r.input_ok:
                lines.append("  the recorded input changed since the verdict:")
            for d in r.differences:
                lines.append(f"  {d['field']}: recorded {_short(d['recorded'])}")
                lines.append(f"  {' ' * len(d['field'])}  now      {_short(d['now'])}")
        print(safe_text("\n".join(lines)))
    return 0 if all(r.ok for r in results) else EXIT_DIFFERENCE
