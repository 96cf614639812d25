"""`relaunch serve`: the attribution service and dashboard (uvicorn + FastAPI).

Listens on 127.0.0.1:8570 by default, or on a Unix socket with `--uds PATH`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from relaunch.cli import llm_options, slack_options
from relaunch.cli.budget_options import add_budget_arguments, budget_from_args
from relaunch.cli.cli_args import ArgumentParser, bounded_float, bounded_int
from relaunch.cli.errors import UserError
from relaunch.cli.token_file import read_token
from relaunch.storage.location import describe, history_url

if TYPE_CHECKING:  # imported lazily at run time (start-up speed)
    from relaunch.attribution.service.settings import ServiceSettings
    from relaunch.restart_agent.model import PolicyConfig

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8570


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Run the attribution service (NVRx-compatible /logs, /v1 API) and dashboard.",
    )
    p.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=bounded_int(0, 65535),
        default=DEFAULT_PORT,
        help="TCP port (default 8570; 0: any free)",
    )
    p.add_argument("--uds", metavar="PATH", help="listen on this Unix socket instead of TCP")
    p.add_argument(
        "--db",
        metavar="URL",
        help="history database URL (default: $RELAUNCH_DB, else "
        "sqlite:///$RELAUNCH_HOME/relaunch.db; RELAUNCH_HOME defaults to ~/.relaunch)",
    )
    p.add_argument(
        "--allowed-root",
        metavar="DIR",
        nargs="+",
        action="extend",
        default=[],
        help="directories whose files clients may name (repeatable); nothing else is read",
    )
    p.add_argument(
        "--token-file", metavar="FILE", help="require `Authorization: Bearer <token in FILE>`"
    )
    p.add_argument(
        "--audit-dir", metavar="DIR", help="write one audit JSON artifact per verdict here"
    )
    p.add_argument(
        "--audit-hmac-key-file",
        metavar="FILE",
        help="sign each audit artifact with an HMAC keyed by FILE's first line (also: "
        "$RELAUNCH_AUDIT_HMAC_KEY_FILE); `relaunch audit --hmac-key-file` verifies it",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="uploaded logs and FR dumps (default $RELAUNCH_HOME/service)",
    )
    p.add_argument(
        "--webhook-url", metavar="URL", help="POST each completed verdict as JSON to this URL"
    )
    p.add_argument(
        "--max-body-bytes",
        type=bounded_int(1, 2**40),
        default=1 << 20,
        help="largest JSON request body",
    )
    p.add_argument(
        "--max-upload-bytes",
        type=bounded_int(1, 2**50),
        default=1 << 30,
        help="largest uploaded log or FR dump set",
    )
    p.add_argument(
        "--rate-limit",
        type=bounded_float(0, 1e6),
        default=200.0,
        metavar="PER_S",
        help="requests per second and client (0: off)",
    )
    p.add_argument(
        "--rate-burst", type=bounded_int(0, 10**9), default=400, help="burst size of the rate limit"
    )
    p.add_argument(
        "--max-pending",
        type=bounded_int(1, 10**6),
        default=256,
        help="analyses queued or running before 503",
    )
    p.add_argument("--workers", type=bounded_int(1, 1024), default=2, help="analysis threads")
    p.add_argument(
        "--analysis-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="longest a request waits for an analysis; then 202 and the verdict is pending",
    )
    add_budget_arguments(p)
    p.add_argument(
        "--poll-interval",
        type=bounded_float(0.01, 3600),
        default=0.5,
        metavar="S",
        help="how often progressive logs are read (seconds)",
    )
    p.add_argument(
        "--node-wait",
        type=bounded_float(0.1, 86400),
        default=60.0,
        metavar="S",
        help="multi-node cycles: longest wait after the first node's end for the other "
        "nodes' logs; then the cycle is decided and the missing nodes are named",
    )
    p.add_argument(
        "--lease-timeout",
        type=bounded_float(0.5, 86400),
        default=60.0,
        metavar="S",
        help="a running job whose launchers all stopped renewing their leases for S "
        "seconds is recorded `lost`",
    )
    p.add_argument("--no-dashboard", action="store_true", help="serve the API only")
    p.add_argument(
        "--dashboard-public",
        action="store_true",
        help="with --token-file: let browsers read the dashboard pages (GET /, /jobs, /search, "
        "/static) without the token; the API and /logs still require it",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host header name the service answers to, besides the bound address, "
        "localhost names and loopback addresses (repeatable; '*' turns the check off). Other "
        "Host headers get 421 (DNS rebinding)",
    )
    p.add_argument(
        "--header-timeout",
        type=bounded_float(0.1, 3600),
        default=10.0,
        metavar="S",
        help="close a connection whose request headers are not complete within S seconds",
    )
    p.add_argument(
        "--body-timeout",
        type=bounded_float(0.1, 3600),
        default=60.0,
        metavar="S",
        help="answer 408 when a piece of a request body takes longer than S seconds",
    )
    p.add_argument(
        "--max-connections",
        type=bounded_int(1, 1_000_000),
        default=1000,
        metavar="N",
        help="concurrent connections and requests before new requests get 503 (the "
        "descriptor limit is raised to fit where the system allows)",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    _add_policy_arguments(p)
    llm_options.add_arguments(p)
    slack_options.add_arguments(p)
    return p


def _add_policy_arguments(p: argparse.ArgumentParser) -> None:
    """The verdict thresholds, named as `relaunch run`'s `--ft-*` flags without `ft-`."""
    from relaunch.attribution.core.policy_config import POLICY_OPTIONS

    for opt in POLICY_OPTIONS:
        flags = [f"--{opt.name}", f"--{opt.name.replace('-', '_')}"]
        p.add_argument(
            *flags,
            dest=opt.dest,
            metavar="N",
            default=None,
            help=f"{opt.help} ({opt.bounds()}, default {opt.default():g})",
        )


def policy_from_args(args: argparse.Namespace) -> PolicyConfig:
    from relaunch.attribution.core.policy_config import POLICY_OPTIONS, build_policy

    values = {o.dest: getattr(args, o.dest, None) for o in POLICY_OPTIONS}
    try:
        return build_policy(values)
    except ValueError as exc:  # names the run flag; say the serve one
        raise UserError(str(exc).replace("--ft-", "--", 1)) from None


def default_dashboard_url(args: argparse.Namespace) -> str | None:
    """The service's own http://HOST:PORT (for links in Slack alerts) when --dashboard-url
    is not given; None for --uds, --port 0 or --no-dashboard (no address a browser can use).
    """
    if args.uds or args.port == 0 or args.no_dashboard:
        return None
    host = args.host
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{args.port}"


def settings_from_args(args: argparse.Namespace) -> ServiceSettings:
    from relaunch.attribution.service.settings import ServiceSettings

    roots = []
    for r in args.allowed_root:
        if not os.path.isdir(r):
            raise UserError(f"--allowed-root is not a directory: {r}")
        roots.append(Path(r))
    if args.webhook_url and not args.webhook_url.startswith(("http://", "https://")):
        raise UserError(f"--webhook-url must be http:// or https://: {args.webhook_url}")
    if not 0.01 <= args.poll_interval <= 3600:
        raise UserError("--poll-interval must be between 0.01 and 3600 seconds")
    for name in ("max_body_bytes", "max_upload_bytes", "max_pending", "workers"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if not 0.01 <= args.analysis_timeout <= 86400:
        raise UserError("--analysis-timeout must be between 0.01 and 86400 seconds")
    if not args.uds and not 0 <= args.port <= 65535:
        raise UserError(f"--port must be 0-65535, got {args.port}")
    if getattr(args, "dashboard_url", None) is None:
        args.dashboard_url = default_dashboard_url(args)
    slack = slack_options.from_args(args)
    policy = policy_from_args(args)
    budget = budget_from_args(args)
    return ServiceSettings(
        policy=policy,
        db_url=history_url(args.db)[0],
        allowed_roots=roots,
        token=read_token(args.token_file) if args.token_file else None,
        audit_dir=Path(args.audit_dir) if args.audit_dir else None,
        data_dir=Path(args.data_dir) if args.data_dir else None,
        webhook_url=args.webhook_url,
        llm_config=llm_options.config_from_args(args),
        slack=slack,
        max_body_bytes=args.max_body_bytes,
        max_upload_bytes=args.max_upload_bytes,
        rate_limit_per_s=args.rate_limit,
        rate_limit_burst=args.rate_burst,
        max_pending_analyses=args.max_pending,
        analysis_workers=args.workers,
        bind_host=None if args.uds else args.host,
        # a Unix socket is out of a browser's reach: no Host check there
        allowed_hosts=["*"] if args.uds else list(args.allowed_host),
        body_timeout_s=args.body_timeout,
        analysis_timeout_s=args.analysis_timeout,
        analysis_cpu_seconds=budget.cpu_seconds,
        analysis_max_kept=budget.max_kept,
        node_wait_s=args.node_wait,
        lease_timeout_s=args.lease_timeout,
        progressive_poll_s=args.poll_interval,
        dashboard=not args.no_dashboard,
        dashboard_public=args.dashboard_public,
    )


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from relaunch.attribution.service.app import create_app
    from relaunch.storage import StorageError

    level = args.log_level.upper()
    logging.basicConfig(level="WARNING", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in (
        "relaunch.attribution",
        "relaunch.storage",
        "relaunch.restart_agent",
        "relaunch.web",
    ):
        logging.getLogger(name).setLevel(level)
    from relaunch.attribution.service.guards import GuardedH11, install_log_limits

    install_log_limits()  # no traceback floods (descriptor exhaustion, probes)
    settings = settings_from_args(args)
    _use_audit_key(args.audit_hmac_key_file)
    if settings.audit_dir is not None:
        try:
            settings.audit_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(
                f"cannot create --audit-dir {settings.audit_dir}: {exc.strerror}"
            ) from None
    try:
        app = create_app(settings)
    except StorageError as exc:
        raise UserError(str(exc)) from None
    print(f"relaunch serve: {describe(*history_url(args.db))}", file=sys.stderr, flush=True)
    sock = _unix_socket(args.uds) if args.uds else None
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        fd=sock.fileno() if sock else None,
        log_level=args.log_level,
        access_log=args.log_level == "debug",
        timeout_graceful_shutdown=5,
        timeout_keep_alive=30,  # pollers reuse connections; don't race the idle close
        limit_concurrency=args.max_connections,
        http=GuardedH11,  # request headers within --header-timeout
    )
    GuardedH11.header_timeout = args.header_timeout
    _raise_fd_limit(args.max_connections)
    server = uvicorn.Server(config)
    if sock is not None:
        print(f"relaunch serve: listening on unix://{args.uds}", flush=True)
    try:
        server.run()
    finally:
        if sock is not None:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(args.uds)
    return 0 if server.started else 1


def _raise_fd_limit(connections: int) -> None:
    """Raise the soft descriptor limit towards the hard one so that --max-connections
    connections fit with room for the database, logs and analyses."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = connections + 256
        if soft != resource.RLIM_INFINITY and soft < want:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (ImportError, ValueError, OSError):
        pass


def _use_audit_key(path: str | None) -> None:
    """Check the audit HMAC key file now (exit 2 if unusable) and hand it to the audit
    writer through $RELAUNCH_AUDIT_HMAC_KEY_FILE."""
    from relaunch.attribution.core.audit import HMAC_KEY_ENV, KeyFileError, read_key_file

    path = path or os.environ.get(HMAC_KEY_ENV)
    if not path:
        return
    try:
        read_key_file(path)
    except KeyFileError as exc:
        raise UserError(str(exc)) from None
    os.environ[HMAC_KEY_ENV] = os.path.abspath(path)


def _unix_socket(path: str) -> socket.socket:
    """Bind the Unix socket ourselves, owner-only (uvicorn would make it 0o666)."""
    if os.path.exists(path):
        if not _is_socket(path):
            raise UserError(f"--uds path exists and is not a socket: {path}")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # stale socket of an ended service
        else:
            raise UserError(f"--uds {path}: another server is listening there")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on --uds {path}: {exc.strerror}") from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(2048)
    return sock


def _is_socket(path: str) -> bool:
    import stat

    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False
