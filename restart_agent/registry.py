"""Loads the pattern registry and the progress dialects from their data files.

The tables themselves are data (`patterns.yaml`, `progress.yaml` beside this module);
this module only reads, validates and compiles them. Extra tables can be added without
code changes through environment variables holding file paths (OS path separator):

- `RELAUNCH_PATTERNS_EXTRA`: more pattern rows, tried BEFORE the built-in ones
  (so a site can override a generic row with a specific one),
- `RELAUNCH_PROGRESS_DIALECTS`: more progress dialect rows, tried after the built-in ones.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
PATTERNS_FILE = HERE / "patterns.yaml"
PROGRESS_FILE = HERE / "progress.yaml"
PATTERNS_ENV = "RELAUNCH_PATTERNS_EXTRA"
PROGRESS_ENV = "RELAUNCH_PROGRESS_DIALECTS"

DOMAINS = ("infrastructure", "workload", "unknown")
ROLES = ("root", "cascade", "confirmation", "teardown", "diagnostic")
RECOVERABILITY = (
    "retry",
    "probable",
    "stop",
    "user_import",
    "config",
    "terminated",
    "unknown",
    "n/a",
)
KINDS = ("iteration", "checkpoint")


class RegistryError(ValueError):
    """A pattern or dialect table is malformed (names the file and the row)."""


@dataclass(frozen=True)
class PatternRow:
    id: str
    regex: re.Pattern[str]
    failure_class: str
    domain: str
    role: str
    recoverability: str
    triggers: tuple[str, ...]
    examples: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class DialectRow:
    id: str
    kind: str
    anchor: str
    regex: re.Pattern[str]
    bregex: re.Pattern[bytes]  # the same pattern over raw bytes (what the scanner runs)
    examples: tuple[str, ...] = ()


@dataclass(frozen=True)
class Registry:
    patterns: tuple[PatternRow, ...]
    prefilter: tuple[str, ...]
    dialects: tuple[DialectRow, ...]
    sources: tuple[str, ...] = field(default=())


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise RegistryError(f"{path}: expected a mapping at the top level")
    return data


def _compile(path: Path, row_id: str, regex: Any) -> re.Pattern[str]:
    if not isinstance(regex, str) or not regex:
        raise RegistryError(f"{path}: row {row_id!r}: regex must be a non-empty string")
    try:
        return re.compile(regex)
    except re.error as exc:
        raise RegistryError(f"{path}: row {row_id!r}: bad regex: {exc}") from exc


def _choice(path: Path, row_id: str, name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise RegistryError(
            f"{path}: row {row_id!r}: {name} must be one of {', '.join(allowed)}, got {value!r}"
        )
    return str(value)


def _pattern_rows(path: Path, data: dict[str, Any]) -> list[PatternRow]:
    rows = []
    for i, raw in enumerate(data.get("patterns") or []):
        if not isinstance(raw, dict) or not raw.get("id"):
            raise RegistryError(f"{path}: pattern row {i} needs an id")
        rid = str(raw["id"])
        if not raw.get("failure_class"):
            raise RegistryError(f"{path}: row {rid!r}: failure_class is required")
        rows.append(
            PatternRow(
                id=rid,
                regex=_compile(path, rid, raw.get("regex")),
                failure_class=str(raw["failure_class"]),
                domain=_choice(path, rid, "domain", raw.get("domain"), DOMAINS),
                role=_choice(path, rid, "role", raw.get("role"), ROLES),
                recoverability=_choice(
                    path,
                    rid,
                    "recoverability",
                    raw.get("recoverability", "unknown"),
                    RECOVERABILITY,
                ),
                triggers=_triggers(path, rid, raw.get("triggers")),
                requires=_triggers(path, rid, raw["requires"]) if raw.get("requires") else (),
                examples=tuple(str(e) for e in raw.get("examples") or ()),
            )
        )
    return rows


def _triggers(path: Path, row_id: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise RegistryError(f"{path}: row {row_id!r}: triggers must be a non-empty list")
    out = []
    for t in value:
        if not isinstance(t, str) or not t or "\n" in t or "\x00" in t:
            raise RegistryError(f"{path}: row {row_id!r}: bad trigger {t!r}")
        try:
            t.encode("ascii")
        except UnicodeEncodeError as exc:
            raise RegistryError(f"{path}: row {row_id!r}: triggers must be ASCII: {t!r}") from exc
        out.append(t)
    return tuple(out)


def minimal_triggers(triggers: list[str]) -> tuple[str, ...]:
    """The union of triggers without those that contain a shorter one (same line set)."""
    uniq = sorted(set(triggers), key=len)
    kept: list[str] = []
    for t in uniq:
        if not any(k in t for k in kept):
            kept.append(t)
    return tuple(sorted(kept))


def _dialect_rows(path: Path, data: dict[str, Any]) -> list[DialectRow]:
    rows = []
    for i, raw in enumerate(data.get("dialects") or []):
        if not isinstance(raw, dict) or not raw.get("id"):
            raise RegistryError(f"{path}: dialect row {i} needs an id")
        rid = str(raw["id"])
        rx = _compile(path, rid, raw.get("regex"))
        if "it" not in rx.groupindex and "path" not in rx.groupindex:
            raise RegistryError(f"{path}: row {rid!r}: regex needs a named group 'it' or 'path'")
        try:
            brx = re.compile(rx.pattern.encode("ascii"))
        except (UnicodeEncodeError, re.error) as exc:
            raise RegistryError(f"{path}: row {rid!r}: regex must be ASCII: {exc}") from exc
        anchor = raw.get("anchor") or leading_literal(rx.pattern)
        if not isinstance(anchor, str) or not anchor:
            raise RegistryError(
                f"{path}: row {rid!r}: regex must start with a literal (or give an anchor)"
            )
        rows.append(
            DialectRow(
                id=rid,
                kind=_choice(path, rid, "kind", raw.get("kind"), KINDS),
                anchor=anchor,
                regex=rx,
                bregex=brx,
                examples=tuple(str(e) for e in raw.get("examples") or ()),
            )
        )
    return rows


_META = set(".^$*+?{}[]()|\\")


def leading_literal(pattern: str) -> str:
    """The literal text a regex starts with (escapes resolved), '' if none."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum():
            out.append(pattern[i + 1])
            i += 2
            continue
        if c in _META:
            break
        out.append(c)
        i += 1
    lit = "".join(out)
    # a quantifier right after the literal applies to its last character
    if i < len(pattern) and pattern[i] in "*?{" and lit:
        lit = lit[:-1]
    return lit


def _env_paths(name: str) -> list[Path]:
    value = os.environ.get(name, "")
    return [Path(p) for p in value.split(os.pathsep) if p.strip()]


def build_registry(
    pattern_files: list[Path] | None = None, dialect_files: list[Path] | None = None
) -> Registry:
    """Build a registry from the built-in tables plus extra files (not the environment)."""
    patterns = _pattern_rows(PATTERNS_FILE, _load_yaml(PATTERNS_FILE))
    extra_rows: list[PatternRow] = []
    sources = [str(PATTERNS_FILE), str(PROGRESS_FILE)]
    for path in pattern_files or ():
        extra_rows += _pattern_rows(path, _load_yaml(path))
        sources.append(str(path))
    dialects = _dialect_rows(PROGRESS_FILE, _load_yaml(PROGRESS_FILE))
    for path in dialect_files or ():
        dialects += _dialect_rows(path, _load_yaml(path))
        sources.append(str(path))
    rows = extra_rows + patterns
    if not rows:
        raise RegistryError(f"{PATTERNS_FILE}: no pattern rows")
    return Registry(
        patterns=tuple(rows),
        prefilter=minimal_triggers([t for r in rows for t in r.triggers]),
        dialects=tuple(dialects),
        sources=tuple(sources),
    )


@functools.lru_cache(maxsize=8)
def _cached(patterns_env: str, progress_env: str) -> Registry:
    return build_registry(_env_paths(PATTERNS_ENV), _env_paths(PROGRESS_ENV))


def default_registry() -> Registry:
    """The registry in force: built-in tables plus the files named by the environment."""
    return _cached(os.environ.get(PATTERNS_ENV, ""), os.environ.get(PROGRESS_ENV, ""))
