"""Rank prefixes that launchers put in front of worker output lines.

Understood (at the start of a line):

- `[rank3]:`          torch elastic / torchrun (`--local-ranks-filter`, `--tee`)
- `[default3]:`       torchrun `--tee` with the default role name
- `[rank 3]:`         relaunch's own launcher (`launcher.cycle_log`)
- `[1,3]<stderr>:`    Open MPI `--tag-output` (`<stdout>` too)
- `3: `               Slurm `srun --label` (optionally space-padded)
- `Rank 3: `          a worker wrapper's or a reporter's own rank label (`rank 3: ` too)
- `[Rank 3] `, `[RANK 3] `, `[rank: 3] ` DeepSpeed's / a logger's / Lightning's rank tag starting a line (a blank, no colon)
- stacked: `15: [rank15]:`, `[default0]:[rank12]:` (torch's `[rank N]` is the global rank
  and wins); a glued `[stderr]` / `[stdout]` stream tag is dropped
- a container log collector's service tag (docker compose `daskcluster-worker-1     | `)
  and Ray's worker tag (`(pid=7) `, `(RayTrainWorker pid=7, ip=10.0.0.3) `): dropped like a
  stream tag (each names a container or a process, not a rank)
- torch's `[rank3]:` / `[rank 3]:` / `[default3]:` behind a LEAD that a logger, a log
  collector or a worker pool put in front of the line: a timestamp
  (`2024-03-01 10:00:00,123 - [rank3]:`, `[2024-03-01 10:00:00] [rank3]:`, glog's
  `I0301 10:00:00.123 12 f.cc:4] [rank3]:`), Ray's `(RayTrainWorker pid=7) [rank3]:`, a
  `<name> [stderr] [rank3]:` tag, the quote that opens a wrapper's quoted message
  (SageMaker's `ErrorMessage "[rank3]: ValueError: ...`); Determined's log shipper tags a
  worker line `<>  [2021-12-07 10:40:07] 152337f9 [rank=1] || <line>` (the `[rank=N] || `
  tag behind its timestamp and container-id lead). The lead is at most `MAX_LEAD`
  characters, ends with a blank, `]`, `)` or a quote, and holds no `": "` (so the `[rank3]:`
  quoted inside a message such as `RuntimeError: failed on [rank3]: x` is no prefix: the
  message stays the body)

- Open MPI's tag behind its `--timestamp-output` time (`Mon Sep 24 14:28:29 2018[1,0]<stderr>:`,
  glued): the rank is the tag's
- Horovod's `[3]<stderr>:` (horovodrun with its gloo controller) and SageMaker's MPI tag
  `[1,mpirank:3,algo-1]<stderr>:`: the rank is the one in the tag
- any other LEAD before a line that starts with a fixed token (generic lead): a log
  collector's, a logger's, a shell's or a paste's text in front of `Traceback (most recent
  call last):`, a `File "` frame, an exception line (`TypeError: ...`, `pkg.SomeError: ...`,
  a bare `KeyboardInterrupt`), a C++ exception's `what():` line, mp.spawn's `-- Process N
  terminated with` / xmp.spawn's `Exception in device=` header, or a torch rank prefix.
  Such leads: containerd/CRI's `2024-03-01T10:00:00.123Z stderr F `, `kubectl logs
  --prefix`'s `[pod/x/c] `, pdsh's `worker-1: `, `ERROR:root:`, a pasted line number
  `  18 `, a quote `> `, a Ray tag still wrapped in colour codes. The lead is at most
  `MAX_LEAD` characters, ends with a blank or one of `]):>|-`, and says neither `Error`,
  `Exception`, `Traceback`, `File "` nor a quote (so a message that names an exception,
  `RuntimeError: Caught ValueError: x`, keeps its first name), is not itself an exception
  line (`etcd.EtcdConnectionFailed: ...`), a bare name ending the line follows no sentence
  (`...: failed due to MaxRetryError` keeps its text), and outside its brackets it holds at
  most `MAX_LEAD_WORDS` words (tags, not prose: `node3 kernel: Out of memory: Killed process
  ... - ValueError: x` keeps the kernel's report); a torch rank prefix right
  after it is read as above. A lead names no rank: a host, a pod or a line number is not
  one. Only those fixed-token lines are looked for behind such a lead, so a line whose
  meaning needs its lead (a host named in an NCCL line) is matched as before.

Rank numbers are bounded: more than 8 digits (e.g. a 2^64 `N: ` label) is no prefix at all,
never an exception.

Lines of the launcher itself start with `[relaunch]` or `[launcher]` (after an optional
timestamp-free rank-less position); they carry no rank unless they say `rank=N`/`rank N`.
The same table drives `RANK_BYTES`, the C-level regex that collects every rank seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PREFIX = re.compile(
    r"^(?:\[(?:rank ?|default)(?P<r1>\d{1,8})\]:|\[\d{1,8},(?P<r2>\d{1,8})\]<std(?:out|err)>:|[ ]*(?P<r3>\d{1,8}): |[Rr]ank (?P<r4>\d{1,8}): |\[(?:Rank ?|RANK ?|rank: ?)(?P<r5>\d{1,8})\] "
    r"|\[(?P<r6>\d{1,8})\]<std(?:out|err)>:|\[\d{1,8},mpirank:(?P<r7>\d{1,8}),[^\]\n]{0,80}\]<std(?:out|err)>:)"
)
_GROUPS = ("r1", "r2", "r3", "r4", "r5", "r6", "r7")
_STREAM = re.compile(r"^\[(?:stdout|stderr)\]")
# docker compose's `<service>-<n>   | ` tag (a name that starts with a letter: a loguru
# `2024-01-01 10:00:00 | ERROR | ...` line starts with a digit and keeps its text)
_COMPOSE = re.compile(r"^[A-Za-z][\w.-]{0,80}? *\| ")
# Ray's worker tag (`(pid=7) `, `(RayTrainWorker pid=7, ip=10.0.0.3) `): names a process, not
# a rank; dropped like a stream tag
_RAY = re.compile(r"^\((?:[A-Za-z_][\w.]{0,80} )?pid=\d{1,10}(?:, ip=[0-9A-Fa-f.:]{1,45})?\) ?")
_LAUNCHER = re.compile(r"^\s*\[(?:relaunch|launcher)\]")
_LAUNCHER_RANK = re.compile(r"\brank[= ](\d{1,8})\b")
MAX_RANK_DIGITS = 8  # a rank written with more digits is no rank (bounded parsing)
# torch's own rank prefix where it does not start the line (behind a timestamp/logger lead),
# and Determined's log shipper's `[rank=N] || ` tag (behind its `[time] <container-id>` lead)
_TORCH = re.compile(r"\[(?:rank ?|default)(?P<r1>\d{1,8})\]:|\[rank=(?P<r2>\d{1,8})\] \|\|")
_LEAD_WORDS = ("[rank", "[default")
# Open MPI's tag anywhere in a line's first MAX_LEAD characters (its own shape is the proof)
_MPI_LEAD = re.compile(r"\[\d{1,8},(?P<r>\d{1,8})\]<std(?:out|err)>:")
_LEAD_ENDS = " \t])\"'"
MAX_LEAD = 160  # characters of timestamp / logger / worker tag before a lead rank prefix
# Where a Python traceback line (or torch's rank prefix) starts behind a generic lead: the
# header, a frame, an exception name followed by ": " or ending the line
_PY_BODY = re.compile(
    r'Traceback \(most recent call last\):|File "|\[(?:rank ?|default)\d{1,8}\]:'
    r"|(?<![\w.])(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception)|Exception)(?=: |$)"
    r"|KeyboardInterrupt$|what\(\): |-- Process \d{1,8} terminated with|Exception in device="
)
# what a generic lead never says (it would be a message naming an exception, not a lead)
_NOT_LEAD = re.compile(r'Error|Exception|Traceback|File "|["\']')
_GENERIC_LEAD_ENDS = " \t]):>|-"
# a lead that is itself an exception line (`etcd.EtcdConnectionFailed: ...`, a type whose
# name ends in neither Error nor Exception): the text behind it is its message, not a line
_EXCEPTION_HEAD = re.compile(r"\s*(?:[A-Za-z_]\w*\.)*[A-Z][a-z0-9]+[A-Z]\w*: ")
_LEAD_WINDOW = MAX_LEAD + 120  # characters searched for the line behind a generic lead
# a lead is tags, not prose: outside its brackets it holds at most MAX_LEAD_WORDS words of 3+
# letters (`node3 kernel: Out of memory: Killed process 1234 (python) - ValueError: x`, a paste
# that lost a line break, keeps its text: the kernel's report is read, not dropped)
_BRACKETED = re.compile(r"\[[^\]]*\]|\([^)]*\)|<[^>]*>")
_WORD = re.compile(r"[A-Za-z]{3,}")
MAX_LEAD_WORDS = 4

# Every rank prefix over raw bytes, each preceded by the newline that starts its line:
# (head, tail, full regex) with the rank digits between head and tail.
RANK_FORMATS: tuple[tuple[bytes, bytes, re.Pattern[bytes]], ...] = tuple(
    (head, tail, re.compile(head + rb"(\d{1,8})" + tail))
    for head, tail in (
        (rb"\n\[rank ?", rb"\]:"),
        (rb"\n\[default", rb"\]:"),
        (rb"\n\[\d{1,8},", rb"\]<std(?:out|err)>:"),
        (rb"\n *", rb": "),
        (rb"\n[Rr]ank ", rb": "),
        (rb"\n\[(?:Rank ?|RANK ?|rank: ?)", rb"\] "),
        (rb"\n\[", rb"\]<std(?:out|err)>:"),
        (rb"\n\[\d{1,8},mpirank:", rb",[^\]\n]{0,80}\]<std(?:out|err)>:"),
    )
)


@dataclass(frozen=True)
class Split:
    rank: int | None
    body: str
    launcher: bool
    rank_at: int = -1  # where the rank's digits start in the line (-1: no rank)
    generic: bool = False  # the body starts behind a generic lead (see the module docstring)


def _one(line: str) -> tuple[int, str, bool, int] | None:
    """(rank, rest, is a `[rank N]` form, where the rank's digits start) of one rank prefix
    at the start of `line`."""
    m = _PREFIX.match(line)
    if m is None:
        return None
    group = next(g for g in _GROUPS if m.group(g))
    rank = int(m.group(group))
    body = line[m.end() :]
    if body.startswith(" "):
        body = body[1:]
    return rank, body, line.startswith("[rank"), m.start(group)


def _lead(line: str) -> tuple[int, str, bool, int] | None:
    """`_one` for torch's rank prefix behind a timestamp / logger / worker lead (see the
    module docstring): (rank, rest, True, where the rank's digits start); Open MPI's tag
    behind its `--timestamp-output` time, glued to it (`Mon Sep 24 14:28:29 2018[1,0]<stderr>:`)."""
    if "]<std" in line:
        mm = _MPI_LEAD.search(line, 1, MAX_LEAD + 40)
        if mm is not None and ": " not in line[: mm.start()]:
            body = line[mm.end() :]
            return (
                int(mm.group("r")),
                body[1:] if body.startswith(" ") else body,
                False,
                mm.start("r"),
            )
    best = -1
    for word in _LEAD_WORDS:
        p = line.find(word, 1, MAX_LEAD + len(word))
        if p > 0 and (best < 0 or p < best):
            best = p
    if best < 0 or line[best - 1] not in _LEAD_ENDS or ": " in line[:best]:
        return None
    m = _TORCH.match(line, best)
    if m is None:
        return None
    group = "r1" if m.group("r1") else "r2"
    body = line[m.end() :]
    if body.startswith(" "):
        body = body[1:]
    return int(m.group(group)), body, True, m.start(group)


def split_prefix(line: str) -> Split:
    """Split one decoded line into (rank, body without prefix, is-launcher-line).

    A glued stream tag (`[stderr]`, `[stdout]`) is dropped first. Stacked prefixes
    (`15: [rank15]:`, `[default0]:[rank12]:`) are both removed; torch's own `[rank N]`
    (the global rank) wins over an outer label (srun task, torchrun local rank). The body
    is always a suffix of `line`; `rank_at` says where the rank's digits are in `line`.
    """
    stream = _STREAM.match(line)
    at = 0
    if stream:
        at = stream.end()
        line = line[at:]
    compose = _COMPOSE.match(line) if "| " in line else None
    if compose:
        at += compose.end()
        line = line[compose.end() :]
    ray = _RAY.match(line) if line.startswith("(") else None
    if ray:
        at += ray.end()
        line = line[ray.end() :]
    outer = _one(line)
    if outer is None and not _LAUNCHER.match(line):
        outer = _lead(line)
    if outer is not None:
        rank, body, _, rank_at = outer
        rank_at += at
        inner = _one(body)
        if inner is not None:
            if inner[2]:
                rank = inner[0]
                rank_at = at + len(line) - len(body) + inner[3]
            body = inner[1]
        lm = _LAUNCHER.match(body)
        return Split(rank, body, bool(lm), rank_at)
    if _LAUNCHER.match(line):
        rm = _LAUNCHER_RANK.search(line)
        if rm is None:
            return Split(None, line.lstrip(), True)
        return Split(int(rm.group(1)), line.lstrip(), True, at + rm.start(1))
    start = _generic_lead(line)
    if start:
        body = line[start:]
        inner = _one(body)
        if inner is not None and inner[2]:  # torch's own rank prefix behind the lead
            return Split(inner[0], inner[1], False, at + start + inner[3], True)
        return Split(None, body, False, -1, True)
    return Split(None, line, False)


def _generic_lead(line: str) -> int:
    """Where a Python traceback line starts behind a generic lead (see the module
    docstring); 0 where there is none (the line starts with it, or no such line is there,
    or the text before it is no lead)."""
    head = line[:_LEAD_WINDOW]
    m = _PY_BODY.search(head)
    if m is not None and m.end() == len(head) < len(line):  # `$` at the window's end only
        m = _PY_BODY.match(line, m.start())
    if m is None:
        return 0
    p = m.start()
    if p == 0 or p > MAX_LEAD or line[p - 1] not in _GENERIC_LEAD_ENDS:
        return 0
    lead = line[:p]
    if not lead.strip() or _NOT_LEAD.search(lead) or _EXCEPTION_HEAD.match(lead):
        return 0
    if m.end() == len(line) and ": " in lead[:-2]:
        return 0  # a bare name ending a sentence (`... failed due to MaxRetryError`)
    if len(_WORD.findall(_BRACKETED.sub(" ", lead))) > MAX_LEAD_WORDS:
        return 0  # prose, not tags
    return p


def bounded_int(text: str | None, digits: int = MAX_RANK_DIGITS) -> int | None:
    """`int(text)` for a decimal of at most `digits` digits, else None (never raises)."""
    if not text or len(text) > digits or not text.isdigit() or not text.isascii():
        return None
    return int(text)
