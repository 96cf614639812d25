"""The configuration room: the settings of `relaunch run`.

Owns the option table, defaults, precedence (default < `--ft-cfg-path` YAML < command
line) and checks (`settings`), one option row (`option`), the value converters and
`ConfigError` (`values`), the YAML reader with NVRx's spellings (`yaml_file`) and the
table of NVRx aliases and ignored keys (`aliases.yaml`, data, not code).

The names callers use are re-exported here, so `relaunch.launcher.config.resolve` and
`from relaunch.launcher.config import RunSettings` keep working.
"""

from __future__ import annotations

from relaunch.launcher.config.option import Option
from relaunch.launcher.config.settings import (
    OPTIONS,
    RunSettings,
    add_arguments,
    normalize_switches,
    resolve,
)
from relaunch.launcher.config.values import ConfigError

__all__ = [
    "OPTIONS",
    "ConfigError",
    "Option",
    "RunSettings",
    "add_arguments",
    "normalize_switches",
    "resolve",
]
