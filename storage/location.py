"""Where the history is: one rule for every command (stdlib only, cheap to import).

`history_url(flag)`: the command's flag (`--db`, `relaunch run --ft-db-url`) >
`$RELAUNCH_DB` > the default `sqlite:///$RELAUNCH_HOME/relaunch.db` (`RELAUNCH_HOME`
defaults to `~/.relaunch`). `describe` is the line `run`, `serve`, `analyze` and `mcp`
print once at start, so a newcomer sees which file their dashboard reads.
"""

from __future__ import annotations

import os
from pathlib import Path


def relaunch_home() -> Path:
    """`$RELAUNCH_HOME`, or `~/.relaunch`."""
    home = os.environ.get("RELAUNCH_HOME")
    return Path(home).expanduser() if home else Path.home() / ".relaunch"


def default_url() -> str:
    """The default database: an SQLite file in `relaunch_home()`."""
    return f"sqlite:///{relaunch_home() / 'relaunch.db'}"


ENV_DB = "RELAUNCH_DB"


def history_url(flag: str | None = None) -> tuple[str, str]:
    """The one history every command uses, and where that choice came from.

    Precedence: the command's flag (`--db`, `relaunch run --ft-db-url`) > `$RELAUNCH_DB` >
    the default `sqlite:///$RELAUNCH_HOME/relaunch.db` (`RELAUNCH_HOME`: `~/.relaunch`).
    """
    if flag:
        return flag, "flag"
    env = os.environ.get(ENV_DB, "").strip()
    if env:
        return env, f"${ENV_DB}"
    return default_url(), "default"


def describe(url: str, source: str) -> str:
    """`history: URL (from ...)`, the line each command prints once at start."""
    shown = url
    if url.startswith("sqlite:///"):
        shown = str(Path(url[len("sqlite:///") :]).expanduser().resolve())
    elif "@" in url:  # never print a password: scheme://user:***@host/...
        head, _, tail = url.rpartition("@")
        scheme, _, cred = head.partition("://")
        shown = f"{scheme}://{cred.split(':', 1)[0]}:***@{tail}"
    where = {"flag": "given on the command line", "default": "default"}.get(source, source)
    return f"history: {shown} ({where}; precedence: flag > ${ENV_DB} > default)"
