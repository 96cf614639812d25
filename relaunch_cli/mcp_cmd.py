"""`relaunch mcp`: serve the MCP tools (attribution/mcp/server.py) over stdio or streamable HTTP.

Over HTTP, `--token-file FILE` requires `Authorization: Bearer <token>` on every request
(as `relaunch serve --token-file`: 401 otherwise); binding an address that is not loopback
without a token is refused (exit 2). Exit codes: 0 stopped normally, 2 bad options, an
unusable database or token file, or an address that cannot be bound (one line on stderr).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys

from relaunch.cli.cli_args import ArgumentParser, bounded_int
from relaunch.cli.errors import UserError
from relaunch.cli.token_file import read_token

DEFAULT_PORT = 8765


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Model Context Protocol server for agents: job history, verdict "
        "explanations, log and Flight Recorder analysis. Speaks MCP on stdio by default.",
    )
    p.add_argument(
        "--db",
        metavar="URL",
        help="history database URL (default: $RELAUNCH_DB, else "
        "sqlite:///$RELAUNCH_HOME/relaunch.db; RELAUNCH_HOME defaults to ~/.relaunch)",
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
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --http: require `Authorization: Bearer <token in FILE>` (needed to bind "
        "an address that is not loopback)",
    )
    return p


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


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
    if args.token_file and not args.http:
        raise UserError("--token-file needs --http (stdio has no authentication to do)")
    if args.http and not args.token_file and not _is_loopback(args.host):
        raise UserError(
            f"refusing to serve on {args.host}, not loopback, without --token-file: anyone "
            "who reaches the port could read the job history"
        )
    return roots


def run(args: argparse.Namespace) -> int:
    roots = _check(args)
    token = read_token(args.token_file) if args.token_file else None
    from relaunch import storage
    from relaunch.attribution.mcp.server import build_server
    from relaunch.storage.location import describe, history_url

    url, source = history_url(args.db)
    try:
        repo = storage.open_repository(url)
    except storage.StorageError as exc:
        raise UserError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a malformed URL (sqlalchemy ArgumentError, ValueError)
        raise UserError(f"cannot open database {url!r}: {exc}") from None
    print(f"relaunch mcp: {describe(url, source)}", file=sys.stderr, flush=True)  # stdout: MCP
    # stdout carries the protocol on stdio: every log line goes to stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    server = build_server(repo, roots, dashboard_url=args.dashboard_url)
    try:
        if not args.http:
            server.run("stdio")
            return 0
        return _serve_http(server, args, token)
    finally:
        repo.close()


def _serve_http(server: object, args: argparse.Namespace, token: str | None) -> int:
    import socket

    import uvicorn

    from relaunch.attribution.mcp.server import http_app

    try:
        sock = socket.create_server(
            (args.host, args.port),
            family=socket.AF_INET6 if ":" in args.host else socket.AF_INET,
        )
    except OSError as exc:
        raise UserError(
            f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None
    app = http_app(server, path=args.path, host=args.host, token=token)  # type: ignore[arg-type]
    auth = "bearer token required" if token else "no authentication (loopback only)"
    print(
        f"relaunch mcp: streamable HTTP on http://{args.host}:{args.port}{args.path} ({auth})",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
    return 0
