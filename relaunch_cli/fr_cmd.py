"""`relaunch fr DIR_OR_FILES... [--format json|text]`: analyse Flight Recorder dumps."""

from __future__ import annotations

import argparse
import json
import sys

from relaunch_cli.errors import UserError


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Analyse NCCL/gloo Flight Recorder dumps (one file per rank, pickle or "
        "JSON) and name the ranks that stalled a collective.",
    )
    p.add_argument("paths", nargs="+", metavar="DIR_OR_FILES", help="dump files or directories")
    p.add_argument("--format", choices=("json", "text"), default="text", help="output format")
    p.add_argument(
        "--workers", type=int, default=None, help="reader processes (default: automatic)"
    )
    return p


def run(args: argparse.Namespace) -> int:
    from attribution.fr import NoDumpsError, analyze_paths, render_text

    if args.workers is not None and args.workers < 1:
        raise UserError("--workers must be at least 1")
    try:
        result = analyze_paths(args.paths, workers=args.workers)
    except FileNotFoundError as exc:
        raise UserError(f"no such file or directory: {exc.args[0] if exc.args else exc}") from None
    except NoDumpsError as exc:
        raise UserError(str(exc)) from None
    except PermissionError as exc:
        raise UserError(f"permission denied: {exc.filename}") from None
    if args.format == "json":
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        sys.stdout.write(render_text(result) + "\n")
    return 0
