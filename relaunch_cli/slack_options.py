"""The Slack flags of `relaunch serve` (`--slack-*`, `--dashboard-url`).

`add_arguments(parser)` adds them; `config_from_args(args)` turns them into a
`SlackConfig` (None when `--slack-channel` is not given; ValueError on bad flags);
`from_args(args)` returns a running `SlackNotifier` or None, with bad flags as a
one-line `UserError`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping

from relaunch.attribution.notify.slack import (
    DEFAULT_BASE_URL,
    ENV_TOKEN,
    TRIGGERS,
    SlackConfig,
    SlackNotifier,
)
from relaunch.cli.errors import UserError
from relaunch.restart_agent.secret_file import read_token_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the Slack flags of `relaunch serve`."""
    group = parser.add_argument_group("Slack alerts")
    group.add_argument(
        "--slack-token-file",
        metavar="PATH",
        help=f"file holding the Slack bot token (default: ${ENV_TOKEN})",
    )
    group.add_argument(
        "--slack-channel", metavar="CHANNEL", help="channel to post to; enables Slack alerts"
    )
    group.add_argument(
        "--slack-on",
        action="append",
        choices=TRIGGERS,
        metavar="{stop,failure,recurring}",
        help="when to post (repeatable); STOP verdicts are always posted",
    )
    group.add_argument(
        "--slack-straggler-reports",
        type=int,
        metavar="N",
        help="also post when a rank stayed below the straggler threshold in >= N "
        "consecutive reports (off by default; docs/straggler.md)",
    )
    group.add_argument(
        "--dashboard-url",
        metavar="URL",
        help="public URL of the dashboard, linked from alerts (e.g. http://host:8000)",
    )
    group.add_argument(
        "--slack-base-url",
        default=DEFAULT_BASE_URL,
        metavar="URL",
        help=argparse.SUPPRESS,  # tests and Slack-compatible gateways
    )


def read_token(token_file: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The bot token from `token_file`, else from $SLACK_BOT_TOKEN; None when neither.

    A token file that cannot be used is a ValueError (`TokenFileError`)."""
    if token_file:
        return read_token_file(token_file, "--slack-token-file")
    env = os.environ if environ is None else environ
    return env.get(ENV_TOKEN) or None


def config_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> SlackConfig | None:
    """A `SlackConfig` when `--slack-channel` is given, else None. ValueError on bad flags."""
    channel = getattr(args, "slack_channel", None)
    token_file = getattr(args, "slack_token_file", None)
    on: Iterable[str] = getattr(args, "slack_on", None) or ()
    straggler_reports = getattr(args, "slack_straggler_reports", None)
    if not channel:
        if token_file or on or straggler_reports is not None:
            raise ValueError(
                "--slack-token-file/--slack-on/--slack-straggler-reports need --slack-channel"
            )
        return None
    token = read_token(token_file, environ)
    if not token:
        raise ValueError(f"--slack-channel needs a token: --slack-token-file or ${ENV_TOKEN}")
    base_url = getattr(args, "slack_base_url", None) or DEFAULT_BASE_URL
    if not base_url.endswith("/"):
        base_url += "/"
    return SlackConfig(
        token=token,
        channel=channel,
        on=frozenset(on) | {"stop"},
        dashboard_url=getattr(args, "dashboard_url", None),
        base_url=base_url,
        straggler_reports=straggler_reports,
    )


def from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> SlackNotifier | None:
    """A running `SlackNotifier` when the flags configure Slack, else None.

    Raises `relaunch_cli.errors.UserError` (a one-line error) on bad flags.
    """
    try:
        config = config_from_args(args, environ)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    return None if config is None else SlackNotifier(config)
