"""Worker output on the launcher's console, with torchrun's `--redirects`, `--tee` and
`--local-ranks-filter` semantics.

The cycle log always receives every line (it is the analysis input); this module decides
which lines also reach the console and how they look, per local rank and stream:

- neither redirected nor teed (torchrun's default `0`): the line as the worker wrote it;
- redirected (`-r`): cycle log only;
- teed (`-t`): the console too, prefixed like torchrun's tee (`[rank0]: ` by default,
  `[ROLE0]:` when `--role` is given, or `--log-line-prefix-template`);
- local ranks outside `--local-ranks-filter`: nothing on the console.

Values are torch elastic's own (`Std.from_str`: `0`-`3` or `LOCAL_RANK:VALUE,...`), parsed
by the same function, so the accepted spellings are exactly torchrun's.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from string import Template
from typing import TextIO

from torch.distributed.elastic.multiprocessing.api import Std, to_map

DEFAULT_ROLE = "default"
DEFAULT_TEMPLATE = "[rank${rank}]: "  # torch's own per-rank prefix (its excepthook's)
ROLE_TEMPLATE = "[${role_name}${local_rank}]:"  # torchrun's tee header


def parse_std(text: str) -> Std | dict[int, Std]:
    """torchrun's `--redirects`/`--tee` value; ValueError with torch's reason if bad."""
    try:
        return Std.from_str(str(text).strip())
    except ValueError:
        raise ValueError("expected 0-3 or LOCAL_RANK:0-3,... (e.g. 3 or 0:1,1:2)") from None


def parse_ranks_filter(text: str) -> frozenset[int]:
    """torchrun's `--local-ranks-filter`: comma-separated local ranks ('' = all)."""
    text = str(text).strip()
    if not text:
        return frozenset()
    try:
        ranks = frozenset(int(p) for p in text.split(","))
    except ValueError:
        raise ValueError("must be a comma-separated list of integers, e.g. 0,1,2") from None
    if any(r < 0 for r in ranks):
        raise ValueError("local ranks are >= 0")
    return ranks


def check_template(text: str) -> str:
    """A `--log-line-prefix-template` (`${role_name}`, `${rank}`, `${local_rank}`)."""
    try:
        Template(text).substitute(role_name="r", rank=0, local_rank=0)
    except (KeyError, ValueError) as exc:
        raise ValueError(
            f"bad placeholder ({exc}); use ${{role_name}}, ${{rank}}, ${{local_rank}}"
        ) from None
    return text


@dataclass(frozen=True)
class ConsoleSpec:
    """What the console shows, as parsed from the options."""

    redirects: Std | dict[int, Std] = Std.NONE
    tee: Std | dict[int, Std] = Std.NONE
    ranks_filter: frozenset[int] = frozenset()
    role: str = DEFAULT_ROLE
    template: str = ""  # --log-line-prefix-template ('' = the default)

    def prefix_template(self) -> str:
        if self.template:
            return self.template
        return ROLE_TEMPLATE if self.role != DEFAULT_ROLE else DEFAULT_TEMPLATE


class Console:
    """Echoes cycle-log lines to stdout/stderr by the spec. Called from the log writer."""

    def __init__(
        self,
        spec: ConsoleSpec,
        local_world_size: int,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.spec = spec
        self._redirects = to_map(spec.redirects, local_world_size)
        self._tee = to_map(spec.tee, local_world_size)
        self._template = Template(spec.prefix_template())
        self._out = stdout
        self._err = stderr
        self._lock = threading.Lock()
        self._dirty: set[TextIO] = set()
        self._broken = False

    def mode(self, local_rank: int, stream: str) -> str:
        """'raw', 'prefixed' or 'hidden' for one local rank's `out`/`err` stream."""
        if self.spec.ranks_filter and local_rank not in self.spec.ranks_filter:
            return "hidden"
        bit = Std.OUT if stream == "out" else Std.ERR
        if self._tee.get(local_rank, Std.NONE) & bit:
            return "prefixed"
        if self._redirects.get(local_rank, Std.NONE) & bit:
            return "hidden"
        return "raw"

    def prefix(self, local_rank: int, rank: int) -> str:
        return self._template.safe_substitute(
            role_name=self.spec.role, rank=rank, local_rank=local_rank
        )

    def echo(self, local_rank: int, rank: int, stream: str, raw: str, body: str) -> None:
        """One worker line: `raw` as written, `body` without torch's redundant `[rankR]: `."""
        mode = self.mode(local_rank, stream)
        if mode == "hidden":
            return
        if mode == "prefixed":
            prefix = self.prefix(local_rank, rank)
            # torch's excepthook already wrote `[rankR]: `: do not print it twice
            text = prefix + (body if prefix.strip() == f"[rank{rank}]:" else raw)
        else:
            text = raw
        dst = (self._out or sys.stdout) if stream == "out" else (self._err or sys.stderr)
        with self._lock:
            if self._broken:
                return
            try:
                dst.write(text + "\n")
            except (OSError, ValueError):  # a closed console must not stop the cycle log
                self._broken = True
                return
            self._dirty.add(dst)

    def flush(self) -> None:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        for dst in dirty:
            try:
                dst.flush()
            except (OSError, ValueError):
                self._broken = True
