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
KINDS = ("iteration", "checkpoint", "activity", "fallback")


class RegistryError(ValueError):
    """A pattern or dialect table is malformed (names the file and the row)."""


@dataclass(frozen=True)
class PatternRow:
    id: str
    pattern: str  # the regex's source; `regex` is it compiled, on first use
    failure_class: str
    domain: str
    role: str
    recoverability: str
    triggers: tuple[str, ...]
    examples: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    source: str = field(default="", compare=False, repr=False)  # the file it came from
    # what the `rank` group is, recorded as `Evidence.rank_source` (e.g. "mpirun": the
    # process Open MPI's launcher reported); default "message": a rank the message names
    rank_source: str = "message"

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        """The compiled regex. Compiled when first used: a scan tries only the rows whose
        triggers it meets (a few of the table), and compiling all costs ~10 ms per start.
        Extra tables are compiled when loaded (a bad regex is reported there); the built-in
        table's regexes are all compiled by the tests."""
        return _compile(Path(self.source), self.id, self.pattern)


@dataclass(frozen=True)
class DialectRow:
    id: str
    kind: str
    anchor: str
    bregex: re.Pattern[bytes]  # the row's regex over raw bytes (what the scanner runs)
    examples: tuple[str, ...] = ()
    # a match is no progress when this (bytes) regex is found in its segment of the line
    # (from the line start or the last '\r' before it, to the match's end)
    exclude: re.Pattern[bytes] | None = None
    skip_complete: bool = False  # a bar at its end (it == total) is no progress
    skip_start: bool = False  # a bar at its start (0 of its total, in epoch 0) is no progress
    min_it: int = 0  # a match with a smaller number is no progress
    scale: int = 1  # `it` (with its decimals, group `frac`) times this is the iteration
    not_examples: tuple[str, ...] = ()  # lines this dialect must not read

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        """The same regex over text (for tools and tests; the scanner runs `bregex`)."""
        return re.compile(self.bregex.pattern.decode("ascii"))


@dataclass(frozen=True)
class Registry:
    patterns: tuple[PatternRow, ...]
    prefilter: tuple[str, ...]
    dialects: tuple[DialectRow, ...]
    sources: tuple[str, ...] = field(default=())


# libyaml's loader where PyYAML has it: the same data, ~10x faster (the pattern table is
# read at every start of the analyzer, ~50 ms in pure Python)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_STR, _SEQ, _MAP = (f"tag:yaml.org,2002:{t}" for t in ("str", "seq", "map"))


class _NotPlain(Exception):
    """A node `_plain` leaves to PyYAML's constructor."""


def _plain(node: yaml.Node, loader: Any, seen: set[int]) -> Any:
    """What the safe constructor makes of `node`, for plain trees (maps with string keys,
    sequences, scalars), built directly: about half the time of the constructor's generic
    walk. Anything else (merge keys, other keys, tagged collections, an alias) raises
    `_NotPlain`; non-string scalars are handed to the constructor itself."""
    if id(node) in seen:  # an alias: the constructor shares (or recurses into) the object
        raise _NotPlain
    seen.add(id(node))
    kind = type(node)
    if kind is yaml.ScalarNode:
        return node.value if node.tag == _STR else loader.construct_object(node, deep=True)
    if kind is yaml.SequenceNode and node.tag == _SEQ:
        return [_plain(item, loader, seen) for item in node.value]
    if kind is yaml.MappingNode and node.tag == _MAP:
        out = {}
        for key, value in node.value:
            if type(key) is not yaml.ScalarNode or key.tag != _STR:
                raise _NotPlain
            out[key.value] = _plain(value, loader, seen)
        return out
    raise _NotPlain


def load_yaml_text(text: str) -> Any:
    """`yaml.load(text, Loader=CSafeLoader)` (the same data, the same errors), with plain
    documents built by `_plain` (the pattern table: ~8 -> ~4 ms at every start)."""
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            return _plain(node, loader, set())
        except _NotPlain:
            return loader.construct_document(node)
    finally:
        loader.dispose()


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = load_yaml_text(path.read_text(encoding="utf-8"))
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


def _pattern_rows(path: Path, data: dict[str, Any], compile_now: bool = True) -> list[PatternRow]:
    """The rows of a pattern table. `compile_now`: compile every regex here, so a bad one
    is reported at load; False (the built-in table only) leaves each to its first use."""
    rows = []
    for i, raw in enumerate(data.get("patterns") or []):
        if not isinstance(raw, dict) or not raw.get("id"):
            raise RegistryError(f"{path}: pattern row {i} needs an id")
        rid = str(raw["id"])
        if not raw.get("failure_class"):
            raise RegistryError(f"{path}: row {rid!r}: failure_class is required")
        regex = raw.get("regex")
        if compile_now:
            compiled = _compile(path, rid, regex)
        elif not isinstance(regex, str) or not regex:
            raise RegistryError(f"{path}: row {rid!r}: regex must be a non-empty string")
        row = PatternRow(
            id=rid,
            pattern=str(regex),
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
            source=str(path),
            rank_source=_rank_source(path, rid, raw.get("rank_source", "message")),
        )
        if compile_now:
            row.__dict__["regex"] = compiled  # the cached_property's slot
        rows.append(row)
    return rows


def _rank_source(path: Path, row_id: str, value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z_]{0,39}", value):
        raise RegistryError(f"{path}: row {row_id!r}: rank_source must be a lower_case word")
    return value


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


_MAX_SET = 32  # strings kept in a set of alternatives before giving up on it
END = "\n"  # stands for the end of the text in needles ("Error\n": "Error" ends the text)


def _cross(a: frozenset[str], b: frozenset[str]) -> frozenset[str] | None:
    out = frozenset(x + y for x in a for y in b)
    return out if len(out) <= _MAX_SET else None


def _score(s: frozenset[str] | None) -> tuple[int, int]:
    """How selective a set of alternatives is: its shortest string, then fewer strings."""
    if not s:
        return (0, 0)
    return (min(len(x.rstrip(END)) for x in s), -len(s))


def _best(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
    return a if _score(a) >= _score(b) else b


def _info(items: Any) -> tuple[frozenset[str] | None, frozenset[str] | None]:
    """(exact, needed) of a parsed regex sequence (`re._parser` items).

    exact: every string the sequence can match (small finite sets only, else None);
    needed: literals one of which every match contains (None: nothing known).
    """
    exact: frozenset[str] | None = frozenset({""})
    best: frozenset[str] | None = None
    run: frozenset[str] | None = frozenset({""})
    for op, av in items:
        name = str(op)
        e: frozenset[str] | None = None
        need: frozenset[str] | None = None
        if name == "LITERAL":
            e = frozenset({chr(av)})
        elif name == "IN" and all(str(o) == "LITERAL" for o, _ in av) and len(av) <= 4:
            e = frozenset(chr(c) for _, c in av)
        elif name == "AT" and str(av) in ("AT_END", "AT_END_STRING"):
            e = frozenset({END})
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            e = frozenset({""})  # zero-width: matches the empty string (condition ignored)
        elif name == "SUBPATTERN":
            _group, add_flags, del_flags, sub = av
            if (add_flags | del_flags) & (re.IGNORECASE | re.VERBOSE):
                e, need = None, None
            else:
                e, need = _info(sub)
        elif name == "BRANCH":
            infos = [_info(alt) for alt in av[1]]
            if all(x[0] is not None for x in infos):
                union = frozenset[str]().union(*(x[0] for x in infos if x[0] is not None))
                e = union if len(union) <= _MAX_SET else None
            if e is None:
                needs = [x[1] if x[1] is not None else x[0] for x in infos]
                if all(n and "" not in n for n in needs):
                    merged = frozenset[str]().union(*(n for n in needs if n is not None))
                    need = merged if len(merged) <= _MAX_SET else None
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = av
            se, sn = _info(sub)
            if lo >= 1:
                need = _best(sn, se)
                if lo == hi == 1:
                    e = se
        # anything else (ANY, NOT_LITERAL, CATEGORY, IN with a range, GROUPREF, ...):
        # matches unknown text: e and need stay None
        if e is not None:
            run = _cross(run, e) if run is not None else None
            exact = _cross(exact, e) if exact is not None else None
            if run is None:  # too many alternatives: keep what is known, start afresh
                run = frozenset({""})
            continue
        exact = None
        best = _best(best, run if run and "" not in run else None)
        best = _best(best, need if need and "" not in need else None)
        run = frozenset({""})
    best = _best(best, run if run and "" not in run else None)
    return exact, best


@functools.lru_cache(maxsize=4096)
def regex_needles(rx: re.Pattern[str]) -> frozenset[str] | None:
    """Literals one of which every match of `rx` contains, or None if none can be told.

    A small version of the "required literals" analysis of code-search engines, over the
    parse tree of `re`: exact strings of literal runs are kept per sequence, alternatives
    are unioned, optional parts are skipped. Case-insensitive and verbose patterns get None.
    `$` is written as END ("\n", which no searched text holds), so `Error$` gives
    "Error\n": "Error" at the end of the text. A needle never holds END before its end.
    """
    if rx.flags & (re.IGNORECASE | re.VERBOSE):
        return None
    try:
        from re import _parser  # type: ignore[attr-defined]  # private, unstubbed
    except ImportError:  # pragma: no cover - older Pythons name it sre_parse
        import sre_parse as _parser
    try:
        items = _parser.parse(rx.pattern, rx.flags)
    except Exception:  # noqa: BLE001 - any parser trouble: no needles, use the triggers
        return None
    exact, need = _info(list(items))
    got = _best(need, exact if exact and "" not in exact else None)
    if not got or "" in got:
        return None
    try:
        for x in got:
            x.encode("ascii")
    except UnicodeEncodeError:
        return None
    # a needle with END inside can never be found (nothing follows the end): drop it,
    # as the text cannot match that way; a set that loses every needle tells nothing
    got = frozenset(x for x in got if END not in x[:-1])
    if not got or "\x00" in "".join(got) or any(x == END for x in got):
        return None
    return got


def _bytes_regex(path: Path, row_id: str, regex: Any) -> re.Pattern[bytes]:
    """A dialect's regex compiled over bytes, the one form the scanner runs, checked for
    a named group `it` or `path`. A regex that fails as bytes is checked as text first,
    so every bad row gets the error it always got, in the same order (bad regex, missing
    group, not ASCII)."""
    if isinstance(regex, str) and regex:
        try:
            brx = re.compile(regex.encode("ascii"))
        except (UnicodeEncodeError, re.error):
            pass
        else:
            if not brx.flags & re.LOCALE:  # the one thing bytes accept and text does not
                _needs_group(path, row_id, brx.groupindex)
                return brx
    rx = _compile(path, row_id, regex)
    _needs_group(path, row_id, rx.groupindex)
    try:
        return re.compile(rx.pattern.encode("ascii"))
    except (UnicodeEncodeError, re.error) as exc:
        raise RegistryError(f"{path}: row {row_id!r}: regex must be ASCII: {exc}") from exc


def _needs_group(path: Path, row_id: str, groups: Any) -> None:
    if "it" not in groups and "path" not in groups:
        raise RegistryError(f"{path}: row {row_id!r}: regex needs a named group 'it' or 'path'")


def _dialect_rows(path: Path, data: dict[str, Any]) -> list[DialectRow]:
    rows = []
    for i, raw in enumerate(data.get("dialects") or []):
        if not isinstance(raw, dict) or not raw.get("id"):
            raise RegistryError(f"{path}: dialect row {i} needs an id")
        rid = str(raw["id"])
        brx = _bytes_regex(path, rid, raw.get("regex"))
        exclude = None
        if raw.get("exclude") is not None:
            try:
                exclude = re.compile(str(raw["exclude"]).encode("ascii"))
            except (UnicodeEncodeError, re.error) as exc:
                raise RegistryError(f"{path}: row {rid!r}: bad exclude regex: {exc}") from exc
        min_it = raw.get("min", 0)
        if isinstance(min_it, bool) or not isinstance(min_it, int) or min_it < 0:
            raise RegistryError(f"{path}: row {rid!r}: min must be a non-negative integer")
        scale = raw.get("scale", 1)
        if isinstance(scale, bool) or not isinstance(scale, int) or not 1 <= scale <= 10**6:
            raise RegistryError(f"{path}: row {rid!r}: scale must be an integer 1..1000000")
        anchor = raw.get("anchor") or leading_literal(str(raw["regex"]))
        if not isinstance(anchor, str) or not anchor:
            raise RegistryError(
                f"{path}: row {rid!r}: regex must start with a literal (or give an anchor)"
            )
        rows.append(
            DialectRow(
                id=rid,
                kind=_choice(path, rid, "kind", raw.get("kind"), KINDS),
                anchor=anchor,
                bregex=brx,
                examples=tuple(str(e) for e in raw.get("examples") or ()),
                exclude=exclude,
                skip_complete=bool(raw.get("skip_complete", False)),
                skip_start=bool(raw.get("skip_start", False)),
                min_it=min_it,
                scale=scale,
                not_examples=tuple(str(e) for e in raw.get("not_examples") or ()),
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
    # the built-in table's regexes are compiled on first use (tests compile them all)
    patterns = _pattern_rows(PATTERNS_FILE, _load_yaml(PATTERNS_FILE), compile_now=False)
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
