"""The one exception type that the CLI turns into a one-line error and an exit code."""

from __future__ import annotations

from relaunch.attribution.core.terminal import safe_line


class UserError(Exception):
    """A problem with what the user asked for (bad path, bad flag value, unreadable file).

    The CLI prints `relaunch CMD: error: MESSAGE` on stderr and exits with `exit_code`;
    never a traceback. The message is made one safe terminal line (`safe_line`): a file
    name or a value from the input cannot add lines or escape sequences to it.
    """

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(safe_line(str(message)))
        self.exit_code = exit_code
