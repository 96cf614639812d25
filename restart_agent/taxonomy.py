"""Loads `taxonomy.yaml`: signal -> failure class, infrastructure classes that win, and the
frames that make a generic exception an invalid argument/config.

Read once and validated (a malformed table is a `RegistryError` naming the file).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from relaunch.restart_agent.registry import RegistryError, _load_yaml

TAXONOMY_FILE = Path(__file__).resolve().parent / "taxonomy.yaml"


@dataclass(frozen=True)
class Taxonomy:
    signals: dict[str, str]
    exit_code: str
    infrastructure_wins: frozenset[str]
    config_rows: frozenset[str] = frozenset()
    config_functions: re.Pattern[str] | None = None
    # timeout classes a persistent straggler before them may explain (restart_agent/stragglers.py)
    straggler_suspects: frozenset[str] = frozenset()
    # deaths that are usually a consequence of another rank's failure (see taxonomy.yaml)
    follow_on_signals: frozenset[str] = frozenset()
    # restart_agent/desync.py: timeout classes of an all-rank timeout, and fault cascades
    desync_timeouts: frozenset[str] = frozenset()
    desync_faults: frozenset[str] = frozenset()
    # retryable classes that STOP when identical on two consecutive startup cycles
    startup_deterministic: frozenset[str] = frozenset()
    # kills from outside the process that win over a probable workload root (taxonomy.yaml)
    outside_kills: frozenset[str] = frozenset()
    # rows whose message alone can make them a config validation error, and its vocabulary
    config_message_rows: frozenset[str] = frozenset()
    config_messages: re.Pattern[str] | None = None
    # top-level module names that are a project's own folders (ImportError: the user's code)
    own_module_names: frozenset[str] = frozenset()
    # a root's class -> pattern ids of a detail line after it that is the failure (taxonomy.yaml)
    detailed_by: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    detail_lines: int = 8

    def validates_config(self, row_id: str, functions: list[str]) -> bool:
        """A generic exception row raised inside argument/config validation."""
        rx = self.config_functions
        return rx is not None and row_id in self.config_rows and any(rx.match(f) for f in functions)

    def validates_config_message(self, row_id: str, body: str) -> bool:
        """A generic exception row whose message speaks of the run's configuration."""
        rx = self.config_messages
        return rx is not None and row_id in self.config_message_rows and rx.search(body) is not None

    def exit_class(self, signal: str | None) -> str:
        """Failure class of a process exit: by its signal, else the exit-code class."""
        if signal:
            return self.signals.get(signal, "killed_by_signal")
        return self.exit_code


@functools.lru_cache(maxsize=1)
def taxonomy() -> Taxonomy:
    data = _load_yaml(TAXONOMY_FILE)
    signals = data.get("signals")
    wins = data.get("infrastructure_wins")
    exit_code = data.get("exit_code")
    if not isinstance(signals, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in signals.items()
    ):
        raise RegistryError(f"{TAXONOMY_FILE}: signals must map signal names to classes")
    if not isinstance(wins, list) or not all(isinstance(c, str) for c in wins):
        raise RegistryError(f"{TAXONOMY_FILE}: infrastructure_wins must be a list of classes")
    if not isinstance(exit_code, str) or not exit_code:
        raise RegistryError(f"{TAXONOMY_FILE}: exit_code must be a class name")
    cv = data.get("config_validation") or {}
    rows, fns = cv.get("rows") or [], cv.get("functions") or ""
    if not isinstance(rows, list) or not isinstance(fns, str):
        raise RegistryError(
            f"{TAXONOMY_FILE}: config_validation needs rows (list), functions (regex)"
        )
    try:
        rx = re.compile(fns) if fns else None
    except re.error as exc:
        raise RegistryError(f"{TAXONOMY_FILE}: config_validation.functions: {exc}") from exc
    mrows, msgs = cv.get("message_rows") or [], cv.get("messages") or ""
    if not isinstance(mrows, list) or not isinstance(msgs, str):
        raise RegistryError(
            f"{TAXONOMY_FILE}: config_validation needs message_rows (list), messages (regex)"
        )
    try:
        mrx = re.compile(msgs) if msgs else None
    except re.error as exc:
        raise RegistryError(f"{TAXONOMY_FILE}: config_validation.messages: {exc}") from exc
    suspects = data.get("straggler_suspects") or []
    if not isinstance(suspects, list) or not all(isinstance(c, str) for c in suspects):
        raise RegistryError(f"{TAXONOMY_FILE}: straggler_suspects must be a list of classes")
    follow_on = data.get("follow_on_signals") or []
    if not isinstance(follow_on, list) or not all(isinstance(c, str) for c in follow_on):
        raise RegistryError(f"{TAXONOMY_FILE}: follow_on_signals must be a list of signal names")
    desync = data.get("desync") or {}
    if not isinstance(desync, dict):
        raise RegistryError(f"{TAXONOMY_FILE}: desync must be a mapping")
    lists = {
        "desync.timeouts": desync.get("timeouts") or [],
        "desync.faults": desync.get("faults") or [],
        "startup_deterministic": data.get("startup_deterministic") or [],
        "outside_kills": data.get("outside_kills") or [],
        "own_module_names": data.get("own_module_names") or [],
    }
    for name, value in lists.items():
        if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
            raise RegistryError(f"{TAXONOMY_FILE}: {name} must be a list of classes")
    detailed = data.get("detailed_by") or {}
    if not isinstance(detailed, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(c, str) for c in v)
        for k, v in detailed.items()
    ):
        raise RegistryError(f"{TAXONOMY_FILE}: detailed_by must map a class to a list of row ids")
    detail_lines = data.get("detail_lines", 8)
    if not isinstance(detail_lines, int) or isinstance(detail_lines, bool) or detail_lines < 1:
        raise RegistryError(f"{TAXONOMY_FILE}: detail_lines must be a positive integer")
    return Taxonomy(
        dict(signals),
        exit_code,
        frozenset(wins),
        frozenset(map(str, rows)),
        rx,
        frozenset(suspects),
        frozenset(follow_on),
        frozenset(lists["desync.timeouts"]),
        frozenset(lists["desync.faults"]),
        frozenset(lists["startup_deterministic"]),
        frozenset(lists["outside_kills"]),
        config_message_rows=frozenset(map(str, mrows)),
        config_messages=mrx,
        own_module_names=frozenset(lists["own_module_names"]),
        detailed_by={k: frozenset(v) for k, v in detailed.items()},
        detail_lines=detail_lines,
    )
