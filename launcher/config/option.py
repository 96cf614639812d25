"""`Option`: one row of the `relaunch run` option table (`launcher.config.settings.OPTIONS`).

Its own module so that the table (`launcher.config.settings`) and the YAML reader
(`launcher.config.yaml_file`) both import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    flag: str
    dest: str
    type: Callable[[str], Any]
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    is_flag: bool = False  # store_true on the command line
    aliases: tuple[str, ...] = ()  # other spellings on the command line (NVRx's, short)
