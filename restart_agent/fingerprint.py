"""Failure fingerprints and affected entities.

A fingerprint is `failure_class` plus a short hash of the normalised message: numbers,
hex, addresses, volatile path parts, ranks, PIDs, timestamps, IPs and ports are masked,
so the same failure gives the same fingerprint on every rank and in every cycle. The
affected entity (a path, a data index, a checkpoint) is extracted separately and never
enters the fingerprint.
"""

from __future__ import annotations

import re

# CPython's built-in SHA-1 gives hashlib's digest without loading OpenSSL (~3 ms a start)
try:
    from _sha1 import sha1
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import sha1

# Order matters: wider tokens first (timestamps before bare numbers, IPs before numbers).
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(rx), repl)
    for rx, repl in (
        (r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?", "<ts>"),
        (r"\b\d\d:\d\d:\d\d(?:[.,]\d+)?\b", "<ts>"),
        (r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b", "<ip>"),
        (r"\[[0-9a-fA-F:]*:[0-9a-fA-F:]+\](?::\d+)?", "<ip>"),
        (r"\b[\w.-]+:\d{2,5}\b(?=[\s,)\]>]|$)", "<host:port>"),
        (r"(?:/[^\s'\"/:,()\[\]]+)+/?", "<path>"),
        (r"\b0x[0-9a-fA-F]+\b", "<hex>"),
        (r"\b[0-9a-fA-F]{8,}\b", "<hex>"),
        (r"\b(?:pid|PID|tid|rank|Rank|RANK|local_rank|node|host)[=: ]+\S+", "<id>"),
        (r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", "<n>"),
        (r"'[^']{40,}'|\"[^\"]{40,}\"", "<str>"),
        (r"\s+", " "),
    )
)

_QUOTED_PATH = re.compile(r"""['"]((?:/|\.{1,2}/|[A-Za-z]:\\)[^'"]+)['"]""")
_BARE_PATH = re.compile(r"(?<![\w.])(/(?:[^\s'\":,()]+/)*[^\s'\":,()]+)")
_DATA_INDEX_WORDS = ("index", "idx", "sample", "position", "offset", "batch", "iteration", "step")
_DATA_INDEX = re.compile(rf"\b(?:{'|'.join(_DATA_INDEX_WORDS)})[ =:#]+(\d+)", re.IGNORECASE)
_CHECKPOINT_WORDS = ("checkpoint", "ckpt", "iter_")
_CHECKPOINT = re.compile(r"checkpoint|ckpt|iter_\d+", re.IGNORECASE)
_TOKEN_EDGE = re.compile(r"\s")
MAX_INPUT = 4000  # characters of a message looked at (bounds regex time on huge lines)


def normalize(message: str) -> str:
    """The message with every volatile token masked (used for the fingerprint)."""
    text = message[:MAX_INPUT].strip()
    for rx, repl in _MASKS:
        text = rx.sub(repl, text)
    return text.strip()[:400]


def fingerprint(failure_class: str, message: str) -> str:
    """`failure_class:hash` of the normalised message; stable across ranks and cycles."""
    digest = sha1(normalize(message).encode("utf-8", "replace")).hexdigest()[:12]
    return f"{failure_class}:{digest}"


def _holds(text: str, words: tuple[str, ...]) -> bool:
    return any(w in text for w in words)


def entity_of(text: str, hint: str | None = None) -> str | None:
    """The affected entity of a line: a named hint, else a path, checkpoint or data index."""
    if hint:
        return hint.strip()[:300] or None
    text = text[:MAX_INPUT]
    # literals each regex needs, looked for first: most error lines hold none of them. For
    # ASCII text, `lower()` folds case as the IGNORECASE regexes do; other text (where
    # Unicode folding differs, e.g. the Kelvin sign) goes to the regexes unfiltered.
    low = text.lower() if text.isascii() else None
    m = _QUOTED_PATH.search(text) if "'" in text or '"' in text else None
    if m:
        return m.group(1)[:300]
    m = _CHECKPOINT.search(text) if low is None or _holds(low, _CHECKPOINT_WORDS) else None
    if m:
        left = max((e.end() for e in _TOKEN_EDGE.finditer(text, 0, m.start())), default=0)
        right = _TOKEN_EDGE.search(text, m.end())
        token = text[left : right.start() if right else len(text)]
        if "/" in token:
            return token.strip("'\",.:;()[]")[:300]
    m = _BARE_PATH.search(text) if "/" in text else None
    if m and m.group(1).count("/") >= 2:
        return m.group(1).rstrip(".,;:")[:300]
    m = _DATA_INDEX.search(text) if low is None or _holds(low, _DATA_INDEX_WORDS) else None
    if m:
        return m.group(0)[:100]
    return None
