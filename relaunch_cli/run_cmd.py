"""`relaunch run`: parse torchrun-style and `--ft-*` flags, resolve the config, launch.

Options come from `launcher.config` (one table for the CLI and the YAML file); the job
itself is `launcher.agent.launch`. Exit codes are documented in docs/launcher.md. A usage
error is one line (`relaunch run: error: ...`, exit 2), never the whole usage; an unknown
flag names the closest valid one.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import signal
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from relaunch.cli import llm_options
from relaunch.cli.errors import UserError

if TYPE_CHECKING:  # imported lazily at run time (start-up speed)
    from relaunch.launcher.config import RunSettings

EXIT_USAGE = 2


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but an error is one line on stderr (exit 2) with a did-you-mean hint."""

    def error(self, message: str) -> NoReturn:
        m = re.match(r"unrecognized arguments: (\S+)", message)
        if m:
            flag = m.group(1).split("=", 1)[0]
            message = f"unknown option {flag}{self.hint(flag)}"
        else:  # "argument --tee/-t/...: X" -> "--tee: X"
            message = re.sub(r"^argument ([^/:\s]+)(?:/[^:\s]+)*:", r"\1:", message)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")

    def hint(self, flag: str) -> str:
        known = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        return f" (did you mean {close[0]}?)" if close else f" (see {self.prog} --help)"


class _RunParser(_OneLineParser):
    """`relaunch run`'s parser: switches also take NVRx's value style (`--x false`)."""

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        from relaunch.launcher.config import normalize_switches

        given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(normalize_switches(self, given), namespace)


_EARLY_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class _Interrupted(KeyboardInterrupt):
    """A signal before the job started (while torch is imported, options are checked)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupted(signum: int, frame: Any) -> None:
    raise _Interrupted(signum)


def _install_early_handlers() -> None:
    """Until `launch` installs the job's handlers, SIGINT/SIGTERM/SIGHUP/SIGQUIT end
    `relaunch run` with 128+N and one line (no worker exists yet), also when the shell
    started it with SIGINT ignored; `launch` takes over from its first line."""
    for sig in _EARLY_SIGNALS:
        signal.signal(sig, _interrupted)


def build_parser(prog: str) -> argparse.ArgumentParser:
    _install_early_handlers()
    from relaunch.launcher import config

    parser = _RunParser(
        prog=prog,
        description="Launch and supervise a fault-tolerant torch.distributed training job.",
        epilog="Exit codes: 0 success, 1 restart budget spent, 2 usage error (or the job "
        "already running on this host), "
        "3 stopped by a STOP verdict, 4 node unhealthy, 5 no progress (progress guard), "
        "6 this node's rendezvous failed, 128+N signal N. See docs/launcher.md.",
    )
    parser.add_argument(
        "--ft-cfg-path",
        "--ft_cfg_path",
        "--ft-cfg_path",
        dest="ft_cfg_path",
        default=None,
        help="YAML file of options; an option given on the command line wins",
    )
    parser.add_argument(
        "--ft-ignore-missing-cfg",
        dest="ft_ignore_missing_cfg",
        action="store_true",
        help="a missing --ft-cfg-path file is a warning (defaults apply), not an error (NVRx)",
    )
    config.add_arguments(parser)
    llm_options.add_arguments(parser, nvrx=True)
    parser.add_argument("script", help="training script (run as `python -u SCRIPT ARGS...`)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments of the script")
    return parser


def settings_from_args(args: argparse.Namespace) -> RunSettings:
    """Resolve defaults < YAML < CLI; raises UserError on a bad config."""
    from relaunch.launcher import config

    cli = {k: v for k, v in vars(args).items() if k not in ("ft_cfg_path", "ft_ignore_missing_cfg")}
    cfg_path, missing = args.ft_cfg_path, None
    if cfg_path and args.ft_ignore_missing_cfg and not os.path.exists(cfg_path):
        cfg_path, missing = None, f"--ft-cfg-path {args.ft_cfg_path}: no such file; defaults apply"
    try:
        settings = config.resolve(cli, cfg_path)
    except config.ConfigError as exc:
        raise UserError(str(exc)) from None
    if missing:
        settings.warnings.insert(0, missing)
    problem = settings.check_script()
    if problem:
        raise UserError(problem)
    try:
        settings.job_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the log folder {settings.job_dir}: {exc.strerror}"
        ) from None
    if not os.access(settings.job_dir, os.W_OK):
        raise UserError(f"log folder is not writable: {settings.job_dir}")
    from relaunch.launcher.validate import check_settings

    try:
        check_settings(settings)  # every option that points somewhere, before any worker
    except config.ConfigError as exc:
        raise UserError(str(exc)) from None
    try:
        settings.llm_config = llm_options.config_from_args(args)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return settings


def _worker_master(settings: Any) -> None:
    """--master-port given and the rendezvous there: the workers' MASTER_ADDR/MASTER_PORT
    are exactly --master-addr:--master-port (launcher.rdzv.worker_store), as under torchrun."""
    from relaunch.launcher.rdzv.worker_store import MASTER_ENV

    os.environ.pop(MASTER_ENV, None)
    if settings.master_port is None or settings.sources.get("master_port") == "default":
        return
    host, _, port = settings.rdzv_endpoint.rpartition(":")
    if port == str(settings.master_port):
        os.environ[MASTER_ENV] = f"{host}:{settings.master_port}"


def run(args: argparse.Namespace) -> int:
    _install_early_handlers()
    try:
        settings = settings_from_args(args)
        for warning in settings.warnings:
            print(f"relaunch run: warning: {warning}", file=sys.stderr, flush=True)
        from relaunch.launcher.agent import launch, refusal

        if (why := refusal(settings)) is not None:  # one line, nothing else said
            print(f"relaunch: error: {why}", file=sys.stderr, flush=True)
            return 2
        print(f"relaunch run: {settings.history_line()}", file=sys.stderr, flush=True)
        _worker_master(settings)
        return launch(settings).exit_code
    except _Interrupted as exc:
        name = signal.Signals(exc.signum).name
        print(f"relaunch run: interrupted by {name} before the job started", file=sys.stderr)
        return 128 + exc.signum
    finally:
        # the job is over: a signal now must not raise inside the interpreter's shutdown
        for sig in _EARLY_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
