"""Argument parsing that fails in one line, and bounded numeric option types.

`ArgumentParser` is argparse's parser whose usage errors are one line on stderr
(`relaunch CMD: error: MESSAGE (see `relaunch CMD --help`)`, exit 2) instead of the usage
block. `bounded_int(lo, hi)` / `bounded_float(lo, hi)` are `type=` callables that refuse
what is not a number, not finite, or outside [lo, hi], so a value such as
`--cycle 9223372036854775808` is a usage error, never an overflow deep inside.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import NoReturn

from relaunch.attribution.core.terminal import safe_line

EXIT_USAGE = 2
# PostgreSQL INTEGER: the widest cycle number every supported database stores.
MAX_INT32 = 2**31 - 1
_MAX_DIGITS = 40  # longer than any bound here: refused before int() parses it


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with usage errors as one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {safe_line(message)} (see `{self.prog} --help`)\n")
        sys.exit(EXIT_USAGE)


def bounded_int(lo: int, hi: int) -> Callable[[str], int]:
    """A `type=` for an integer option in [lo, hi]."""

    def parse(text: str) -> int:
        t = text.strip()
        if len(t) > _MAX_DIGITS or not t.lstrip("+-").isdigit():
            if len(t) <= _MAX_DIGITS:
                raise argparse.ArgumentTypeError(f"expected an integer, got {t!r}")
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}, got {t[:20]}...")
        value = int(t)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def bounded_float(lo: float, hi: float) -> Callable[[str], float]:
    """A `type=` for a finite number in [lo, hi]."""

    def parse(text: str) -> float:
        t = text.strip()
        try:
            value = float(t[:64]) if len(t) <= 64 else math.inf
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {t[:20]!r}") from None
        if not math.isfinite(value) or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo:g} and {hi:g}, got {t[:20]}")
        return value

    parse.__name__ = "number"
    return parse
