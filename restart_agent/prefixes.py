"""Rank prefixes that launchers put in front of worker output lines.

Understood (at the start of a line):

- `[rank3]:`          torch elastic / torchrun (`--local-ranks-filter`, `--tee`)
- `[default3]:`       torchrun `--tee` with the default role name
- `[rank 3]:`         relaunch's own launcher (`launcher.cycle_log`)
- `[1,3]<stderr>:`    Open MPI `--tag-output` (`<stdout>` too)
- `3: `               Slurm `srun --label` (optionally space-padded)

Lines of the launcher itself start with `[relaunch]` or `[launcher]` (after an optional
timestamp-free rank-less position); they carry no rank unless they say `rank=N`/`rank N`.
The same table drives `RANK_BYTES`, the C-level regex that collects every rank seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PREFIX = re.compile(
    r"^(?:\[(?:rank ?|default)(?P<r1>\d+)\]:|\[\d+,(?P<r2>\d+)\]<std(?:out|err)>:|[ ]*(?P<r3>\d+): )"
)
_LAUNCHER = re.compile(r"^\s*\[(?:relaunch|launcher)\]")
_LAUNCHER_RANK = re.compile(r"\brank[= ](\d+)\b")

# Every rank prefix, as bytes, each preceded by the newline that starts its line.
RANK_BYTES: tuple[re.Pattern[bytes], ...] = (
    re.compile(rb"\n\[rank ?(\d+)\]:"),
    re.compile(rb"\n\[default(\d+)\]:"),
    re.compile(rb"\n\[\d+,(\d+)\]<std(?:out|err)>:"),
    re.compile(rb"\n *(\d+): "),
)
# Literal that must be in a chunk for the matching RANK_BYTES entry to find anything.
RANK_LITERALS: tuple[bytes | None, ...] = (b"\n[rank", b"\n[default", b"]<std", None)


@dataclass(frozen=True)
class Split:
    rank: int | None
    body: str
    launcher: bool


def split_prefix(line: str) -> Split:
    """Split one decoded line into (rank, body without prefix, is-launcher-line)."""
    m = _PREFIX.match(line)
    if m:
        rank = int(m.group("r1") or m.group("r2") or m.group("r3"))
        body = line[m.end() :]
        if body.startswith(" "):
            body = body[1:]
        lm = _LAUNCHER.match(body)
        return Split(rank, body, bool(lm))
    if _LAUNCHER.match(line):
        rm = _LAUNCHER_RANK.search(line)
        return Split(int(rm.group(1)) if rm else None, line.lstrip(), True)
    return Split(None, line, False)
