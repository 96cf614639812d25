"""Read a secret from a file (bearer tokens, the Slack bot token, the LLM API key).

Regular files only, bounded, opened without blocking (`restart_agent.safe_files`, the one
file-safety path): a FIFO, a device or a directory named as the file is an error, never a
hang or a read without end, and a file over the limit is refused before a byte is read.
`read_token_file` gives one `TokenFileError` (a ValueError) line for every problem (the LLM
key file calls `safe_files.read_bounded` and maps its errors itself). Used by `serve`,
`mcp`, the Slack notifier, the launcher's HTTP attribution client and `restart_agent.llm`
(so it lives in the lowest package).
"""

from __future__ import annotations

from relaunch.restart_agent import safe_files
from relaunch.restart_agent.safe_files import NotRegularFile

MAX_TOKEN_BYTES = 4096
__all__ = ["MAX_TOKEN_BYTES", "NotRegularFile", "TokenFileError", "read_token_file"]


class TokenFileError(ValueError):
    """A token file that cannot be used (the message names the option and why)."""


def read_token_file(path: str, option: str = "--token-file") -> str:
    """The file's stripped text; every problem is one `TokenFileError` line."""
    try:  # refused before a byte is read when over the limit
        data = safe_files.read_bounded(path, MAX_TOKEN_BYTES)
    except safe_files.TooLarge:
        raise TokenFileError(f"{option} {path} is larger than {MAX_TOKEN_BYTES} bytes") from None
    except (NotRegularFile, IsADirectoryError):
        raise TokenFileError(f"{option} {path} is not a regular file") from None
    except OSError as exc:
        raise TokenFileError(f"cannot read {option} {path}: {exc.strerror or exc}") from None
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise TokenFileError(f"{option} {path} is not text") from None
    if not token:
        raise TokenFileError(f"{option} {path} is empty")
    return token
