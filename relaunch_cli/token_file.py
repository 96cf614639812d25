"""Read a bearer token file (`--token-file` of `relaunch serve` and `relaunch mcp`) for the
CLI: `restart_agent.secret_file` with its errors as one-line usage errors."""

from __future__ import annotations

from relaunch.cli.errors import UserError
from relaunch.restart_agent.secret_file import TokenFileError, read_token_file


def read_token(path: str, option: str = "--token-file") -> str:
    try:
        return read_token_file(path, option)
    except TokenFileError as exc:
        raise UserError(str(exc)) from None
