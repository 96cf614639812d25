"""`relaunch fr DIR_OR_FILES... [--format json|text]`: analyse Flight Recorder dumps.

Only regular files are read (a FIFO, device or socket is refused on the opened descriptor;
symbolic links inside a directory are not followed; one named here is resolved), each at most 1 GiB counted as read.
A set of more than 131,072 dump files, or of more than 64 GiB together, is refused before
any dump is read (exit 2, one line).
A dump that cannot be used is listed under `unreadable` with the reason.
Exit codes: 0 the set was analysed (unreadable dumps, if any, are listed in the report);
2 bad input: usage, a missing path, or no readable dump at all (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from relaunch.cli.cli_args import ArgumentParser, bounded_int
from relaunch.cli.errors import UserError

MAX_WORKERS = 256


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Analyse NCCL/gloo Flight Recorder dumps (one file per rank, pickle or "
        "JSON) and name the ranks that stalled a collective.",
        epilog="Limits, checked before reading: 1 GiB per dump; 131,072 dump files and"
        " 64 GiB per set (exit 2 beyond them).",
    )
    p.add_argument("paths", nargs="+", metavar="DIR_OR_FILES", help="dump files or directories")
    p.add_argument("--format", choices=("json", "text"), default="text", help="output format")
    p.add_argument(
        "--workers",
        type=bounded_int(1, MAX_WORKERS),
        default=None,
        help=f"reader processes, 1 to {MAX_WORKERS} (default: automatic)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    from relaunch.attribution.fr import NoDumpsError, analyze_paths, render_text
    from relaunch.attribution.fr.reader import DumpSetTooLarge

    # a link named on the command line is the user's choice: read its target (which must
    # still be a regular file); links found inside directories are never followed
    paths = [os.path.realpath(p) if os.path.islink(p) else p for p in args.paths]
    try:
        result = analyze_paths(paths, workers=args.workers)
    except FileNotFoundError as exc:
        raise UserError(f"no such file or directory: {exc.args[0] if exc.args else exc}") from None
    except (NoDumpsError, DumpSetTooLarge) as exc:
        raise UserError(str(exc)) from None
    except PermissionError as exc:
        raise UserError(f"permission denied: {exc.filename}") from None
    except OSError as exc:
        raise UserError(f"cannot read {exc.filename}: {exc.strerror or exc}") from None
    if args.format == "json":
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        sys.stdout.write(render_text(result) + "\n")
    return 0
