"""Read a bearer token file (`--token-file` of `relaunch serve` and `relaunch mcp`) for the
CLI: `attribution.token_file` with its errors as one-line usage errors."""

from __future__ import annotations

from attribution.token_file import TokenFileError, read_token_file
from relaunch_cli.errors import UserError


def read_token(path: str, option: str = "--token-file") -> str:
    try:
        return read_token_file(path, option)
    except TokenFileError as exc:
        raise UserError(str(exc)) from None
