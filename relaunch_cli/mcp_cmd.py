"""`relaunch mcp`: serve the MCP tools (attribution/mcp_server.py) over stdio or streamable HTTP."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys

from relaunch_cli.cli_args import ArgumentParser, bounded_int
from relaunch_cli.errors import UserError

DEFAULT_PORT = 8765


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Model Context Protocol server for agents: job history, verdict "
        "explanations, log and Flight Recorder analysis. Speaks MCP on stdio by default.",
    )
    p.add_argument(
        "--db", metavar="URL", help="history database URL (default: $RELAUNCH_HOME/relaunch.db)"
    )
    p.add_argument(
        "--allowed-root",
        action="append",
        default=[],
        metavar="DIR",
        help="directory whose files analyze_log/analyze_fr_dumps may read (repeatable; none: no file access)",
    )
    p.add_argument("--dashboard-url", metavar="URL", help="dashboard base URL to link in results")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=bounded_int(1, 65535),
        default=DEFAULT_PORT,
        help=f"HTTP port (default {DEFAULT_PORT})",
    )
    p.add_argument("--path", default="/mcp", help="HTTP endpoint path (default /mcp)")
    return p


def _check(args: argparse.Namespace) -> list[str]:
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be between 1 and 65535, got {args.port}")
    if not args.path.startswith("/"):
        raise UserError(f"--path must start with '/', got {args.path!r}")
    roots = []
    for raw in args.allowed_root:
        if not os.path.isdir(raw):
            raise UserError(f"--allowed-root {raw} is not a directory")
        roots.append(os.path.realpath(raw))
    return roots


def run(args: argparse.Namespace) -> int:
    roots = _check(args)
    import storage
    from attribution.mcp_server import build_server

    try:
        repo = storage.open_repository(args.db)
    except storage.StorageError as exc:
        raise UserError(str(exc)) from None
    except Exception as exc:  # a malformed URL (sqlalchemy ArgumentError, ValueError)
        raise UserError(f"cannot open database {args.db!r}: {exc}") from None
    # stdout carries the protocol on stdio: every log line goes to stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    server = build_server(repo, roots, dashboard_url=args.dashboard_url)
    try:
        if not args.http:
            server.run("stdio")
            return 0
        try:
            loopback = ipaddress.ip_address(args.host).is_loopback
        except ValueError:
            loopback = args.host == "localhost"
        if not loopback:
            print(
                f"relaunch mcp: warning: serving on {args.host}, not loopback; anyone who "
                "reaches this port can read the job history",
                file=sys.stderr,
            )
        print(
            f"relaunch mcp: streamable HTTP on http://{args.host}:{args.port}{args.path}",
            file=sys.stderr,
            flush=True,
        )
        try:
            server.run(
                "streamable-http", host=args.host, port=args.port, streamable_http_path=args.path
            )
        except OSError as exc:
            raise UserError(
                f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
            ) from None
        return 0
    finally:
        repo.close()
