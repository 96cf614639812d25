"""Structural classification of an exception that no specific row names.

The generic rows (`structural.rows` in taxonomy.yaml: any `*Error`/`*Exception`, an
`OSError`, a `CUDA error: ...`) leave the domain open; what the line and its traceback show
decides it, from the table in taxonomy.yaml (data, not code):

- where it was raised: the user's own frame, a library's Python, or native code (a C++
  source position in the message: the innermost Python frame only called into it);
- the exception type: a Python programming error (TypeError, KeyError, ...) raised in Python;
- an errno of a device, disk, filesystem or network fault (EIO, ENOSPC, ESTALE, ...);
- infrastructure words (device, driver, node, link, heartbeat, lost, dead, unavailable ...)
  in the message or the type's name, and a frame that sets up an accelerator runtime or a
  collective library (`_lazy_init`, `init_process_group`, ...);
- a file writer's frame (torch.save's `_open_zipfile_writer`, a checkpoint saver) raising
  that its file could not be opened or written (a full or failing disk);
- workload words (expected, must be, mismatch, not supported, invalid ...).

Each adds its weight to the side it leans to. Workload wins only when heavier; a tie with
any infrastructure evidence is infrastructure, no evidence at all is `unknown` (a false STOP
kills a healthy job, a missed STOP only costs cycles up to the job ceiling).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from relaunch.restart_agent.registry import RegistryError, _load_yaml
from relaunch.restart_agent.taxonomy import TAXONOMY_FILE

_FRAME = re.compile(r'^File "(?P<path>[^"]+)", line \d+(?:, in (?P<fn>.+))?')
_TYPE = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?P<type>[A-Za-z_]\w*)(?=:|$)")
_ERRNO = re.compile(r"\[Errno (\d{1,4})\]")
_ERRNO_TEXT = re.compile(r"\[Errno \d{1,4}\][^:,'\"]*")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
WEIGHTS = (
    "programming_error",
    "user_frame",
    "library_frame",
    "workload_words",
    "errno",
    "infrastructure_words",
    "runtime_setup",
    "file_write",
)


@dataclass(frozen=True)
class Structural:
    rows: frozenset[str]
    weights: dict[str, int]
    programming_errors: frozenset[str]
    errno_names: dict[str, int]
    infra_words: re.Pattern[str]
    workload_words: re.Pattern[str]
    native: re.Pattern[str]
    runtime_setup: re.Pattern[str]
    file_writers: re.Pattern[str]
    open_failed: re.Pattern[str]


@dataclass(frozen=True)
class Lean:
    """The outcome: domain, recoverability and the evidence that decided (for the basis)."""

    domain: str
    recoverability: str
    basis: str


def _rx(section: dict[str, object], key: str, flags: int = 0) -> re.Pattern[str]:
    value = section.get(key)
    if not isinstance(value, str) or not value:
        raise RegistryError(f"{TAXONOMY_FILE}: structural.{key} must be a regex")
    try:
        return re.compile(value, flags)
    except re.error as exc:
        raise RegistryError(f"{TAXONOMY_FILE}: structural.{key}: {exc}") from exc


@functools.lru_cache(maxsize=1)
def structural() -> Structural:
    data = _load_yaml(TAXONOMY_FILE).get("structural")
    if not isinstance(data, dict):
        raise RegistryError(f"{TAXONOMY_FILE}: structural must be a mapping")
    rows, weights = data.get("rows"), data.get("weights")
    progs, errnos = data.get("programming_errors"), data.get("errno_infrastructure")
    if not isinstance(rows, list) or not all(isinstance(r, str) for r in rows):
        raise RegistryError(f"{TAXONOMY_FILE}: structural.rows must be a list of row ids")
    if not isinstance(weights, dict) or sorted(weights) != sorted(WEIGHTS):
        raise RegistryError(f"{TAXONOMY_FILE}: structural.weights must name {', '.join(WEIGHTS)}")
    if not all(type(v) is int and 0 <= v <= 100 for v in weights.values()):
        raise RegistryError(f"{TAXONOMY_FILE}: structural.weights must be integers 0..100")
    if not isinstance(progs, list) or not all(isinstance(p, str) for p in progs):
        raise RegistryError(f"{TAXONOMY_FILE}: structural.programming_errors must be a list")
    if not isinstance(errnos, dict) or not all(
        isinstance(k, str) and type(v) is int for k, v in errnos.items()
    ):
        raise RegistryError(
            f"{TAXONOMY_FILE}: structural.errno_infrastructure maps names to numbers"
        )
    return Structural(
        frozenset(rows),
        dict(weights),
        frozenset(progs),
        dict(errnos),
        _rx(data, "infrastructure_words", re.IGNORECASE),
        _rx(data, "workload_words", re.IGNORECASE),
        _rx(data, "native"),
        _rx(data, "runtime_setup"),
        _rx(data, "file_writers"),
        _rx(data, "open_failed"),
    )


MAX_WORD_HITS = 2  # distinct words counted per side (more say nothing new)


def _distinct(rx: re.Pattern[str], text: str) -> list[str]:
    """The first MAX_WORD_HITS distinct words (case and a plural s ignored) `rx` finds."""
    out: dict[str, str] = {}
    for m in rx.finditer(text):
        key = m.group(0).lower().rstrip("s")
        out.setdefault(key, m.group(0))
        if len(out) >= MAX_WORD_HITS:
            break
    return list(out.values())


def lean(body: str, frames: list[str], user_frame: str | None) -> Lean:
    """Domain and recoverability of the exception line `body` (without its rank prefix)
    given its traceback's frame texts (`File "...", line N, in f`, outermost first)."""
    s = structural()
    w = s.weights
    infra: list[str] = []
    work: list[str] = []
    score_i = score_w = 0
    tm = _TYPE.match(body)
    etype = tm.group("type") if tm else ""
    parsed = [m for t in frames if (m := _FRAME.match(t))]
    native = s.native.search(body) is not None
    if etype in s.programming_errors and parsed and not native:
        score_w += w["programming_error"]
        work.append(f"{etype} raised in Python code")
    if parsed and not native:
        if user_frame is not None and parsed[-1].group("path") in user_frame:
            score_w += w["user_frame"]
            work.append("raised in the user's own frame")
        else:
            score_w += w["library_frame"]
            work.append("raised by a library's Python")
    notes = ["raised in native code or a system call"] if native else []
    names = {n for n in s.errno_names if re.search(rf"\b{n}\b", body)}
    nums = {int(m.group(1)) for m in _ERRNO.finditer(body)}
    names |= {n for n, num in s.errno_names.items() if num in nums}
    if names:
        score_i += w["errno"]
        infra.append("errno " + "/".join(sorted(names)))
    words_text = _CAMEL.sub(" ", etype) + " " + body[len(tm.group(0)) if tm else 0 :]
    hits = _distinct(s.infra_words, words_text)
    if hits:
        score_i += w["infrastructure_words"] * len(hits)
        infra.append("infrastructure word(s) " + ", ".join(map(repr, hits)))
    fns = [m.group("fn") or "" for m in parsed]
    setup = next((f for f in fns if s.runtime_setup.match(f)), None)
    if setup:
        score_i += w["runtime_setup"]
        infra.append(f"raised while setting up the runtime ({setup})")
    writer = next((f for f in fns if s.file_writers.match(f)), None)
    if writer and s.open_failed.search(body):
        score_i += w["file_write"]
        infra.append(f"a file writer ({writer}) could not open or write its file")
    hits = _distinct(s.workload_words, _ERRNO_TEXT.sub(" ", body))
    if hits:
        score_w += w["workload_words"] * len(hits)
        work.append("workload word(s) " + ", ".join(map(repr, hits)))
    said = "; ".join(infra + work + notes) or "no structural evidence either way"
    if score_i > 0 and score_i >= score_w:
        tie = score_i == score_w
        how = "infrastructure" + (" (balanced evidence leans RESTART)" if tie else "")
        return Lean("infrastructure", "retry", f"{how}: {said}")
    if score_w > score_i:
        return Lean("workload", "probable", f"probable workload: {said}")
    return Lean("unknown", "unknown", f"unknown: {said}")
