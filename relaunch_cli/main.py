"""Dispatch `relaunch SUBCOMMAND ...` to the module that owns that subcommand.

Each subcommand lives in its own module under `relaunch_cli/` and exposes
`build_parser(prog: str) -> argparse.ArgumentParser` and `run(args) -> int`.
Modules are imported only when their subcommand is chosen, so `relaunch run`
does not pay for importing FastAPI and `relaunch analyze` starts fast.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from relaunch.cli.errors import UserError

# name -> (module, one-line help). Order is the order shown in `relaunch --help`.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("relaunch.cli.run_cmd", "launch and supervise a fault-tolerant training job"),
    "analyze": (
        "relaunch.cli.analyze_cmd",
        "analyse one cycle log and print a STOP/RESTART verdict",
    ),
    "fr": ("relaunch.cli.fr_cmd", "analyse NCCL Flight Recorder dumps and name culprit ranks"),
    "serve": ("relaunch.cli.serve_cmd", "run the attribution service and dashboard"),
    "mcp": ("relaunch.cli.mcp_cmd", "run the MCP server for agents (stdio, or --http)"),
    "audit": ("relaunch.cli.audit_cmd", "re-check an audit artifact against its recorded inputs"),
    "demo": ("relaunch.cli.demo_cmd", "run the end-to-end demo job on this machine"),
}

EXIT_USAGE = 2


def _usage() -> str:
    width = max(len(n) for n in SUBCOMMANDS)
    lines = ["usage: relaunch SUBCOMMAND [ARGS...]", "", "subcommands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    lines += ["", "Run `relaunch SUBCOMMAND --help` for the options of one subcommand."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else EXIT_USAGE
    if args[0] == "--version":
        from importlib.metadata import version

        print(f"relaunch {version('relaunch')}")
        return 0
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"relaunch: unknown subcommand {name!r}; try `relaunch --help`", file=sys.stderr)
        return EXIT_USAGE
    module = importlib.import_module(SUBCOMMANDS[name][0])
    parser = module.build_parser(f"relaunch {name}")
    parsed = parser.parse_args(rest)
    try:
        return int(module.run(parsed) or 0)
    except UserError as exc:
        print(f"relaunch {name}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"relaunch {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
