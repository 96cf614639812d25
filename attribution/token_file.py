"""Read a secret from a token file (bearer tokens, the Slack bot token): its stripped text.

Regular files only, at most 4 KiB, opened without blocking: a FIFO or a device named as the
token file is a one-line `TokenFileError` (a ValueError), never a hang. Used by `serve`,
`mcp`, the Slack notifier and the launcher's HTTP attribution client.
"""

from __future__ import annotations

import os
import stat

MAX_TOKEN_BYTES = 4096


class TokenFileError(ValueError):
    """A token file that cannot be used (the message names the option and why)."""


def read_token_file(path: str, option: str = "--token-file") -> str:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise TokenFileError(f"cannot read {option} {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb", buffering=0) as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TokenFileError(f"{option} {path} is not a regular file")
        data = fh.read(MAX_TOKEN_BYTES + 1)
    if len(data) > MAX_TOKEN_BYTES:
        raise TokenFileError(f"{option} {path} is larger than {MAX_TOKEN_BYTES} bytes")
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise TokenFileError(f"{option} {path} is not text") from None
    if not token:
        raise TokenFileError(f"{option} {path} is empty")
    return token
