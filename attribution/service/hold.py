"""Test-only: hold the analyses of chosen jobs at a FIFO, so that tests keep an analysis in
flight for as long as they need without sleeping or timing anything.

With `RELAUNCH_TEST_ANALYSIS_HOLD=DIR` in the environment of `relaunch serve`, an analysis
of a cycle of job J first opens `DIR/J` when that is a FIFO and reads it to its end: the
analysis waits until the test opens the FIFO for writing and closes it (or the service is
killed). Without the variable, or without the FIFO, analyses are not held. Never set in
production.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from relaunch.attribution.core.files import safe_name

ENV = "RELAUNCH_TEST_ANALYSIS_HOLD"


def fifo_hold(directory: Path) -> Callable[[str], None]:
    """A hold function: blocks an analysis of `job_id` at `directory/<job_id>` if a FIFO."""

    def hold(job_id: str) -> None:
        path = directory / safe_name(job_id)
        try:
            if not stat.S_ISFIFO(os.lstat(path).st_mode):
                return
        except OSError:
            return
        with open(path, "rb") as fh:  # blocks until the test opens it for writing
            fh.read()

    return hold


def from_environment() -> Callable[[str], None] | None:
    directory = os.environ.get(ENV)
    return fifo_hold(Path(directory)) if directory else None
