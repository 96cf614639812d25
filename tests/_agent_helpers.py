"""Shared helpers for the restart agent's tests: scanning text, feeding chunkings."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import ModuleType

from relaunch.restart_agent import LogScanner
from relaunch.restart_agent.model import CycleEvidence

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
LOGS = FIXTURES / "logs"


def make_logs() -> ModuleType:
    """tests/fixtures/make_logs.py as a module (it is a script, not a package member)."""
    spec = importlib.util.spec_from_file_location("make_logs", FIXTURES / "make_logs.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def scan_text(text: str | bytes, **kw: object) -> CycleEvidence:
    data = text.encode() if isinstance(text, str) else text
    s = LogScanner(**kw)  # type: ignore[arg-type]
    s.feed(data)
    return s.finish()


def native_installed() -> bool:
    """Whether the `hyperscan` package (restart_agent.multiscan's native backend) imports."""
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


def scan_chunked(data: bytes, sizes: list[int]) -> CycleEvidence:
    s = LogScanner()
    i = 0
    k = 0
    while i < len(data):
        n = sizes[k % len(sizes)]
        s.feed(data[i : i + n])
        i += n
        k += 1
    return s.finish()


def random_chunkings(seed: int, count: int, largest: int) -> list[list[int]]:
    rnd = random.Random(seed)
    out = [[1], [2], [3], [7], [64], [4096], [largest]]
    while len(out) < count:
        out.append([rnd.randint(1, largest) for _ in range(rnd.randint(1, 9))])
    return out


def run_job(logs: list[str], config: object | None = None) -> list[object]:
    """Decide every cycle of a job in turn, each with the stored verdicts before it.

    The history goes through `Verdict.to_dict()` -> JSON -> `PriorCycle.from_verdict`, the
    way the service stores and reads it back.
    """
    import json

    from relaunch.restart_agent import PolicyConfig, PriorCycle, decide

    cfg = config or PolicyConfig()
    history: list[PriorCycle] = []
    verdicts = []
    for i, text in enumerate(logs):
        v = decide(scan_text(text), history, cfg)  # type: ignore[arg-type]
        verdicts.append(v)
        history.append(PriorCycle.from_verdict(i, json.loads(json.dumps(v.to_dict()))))
    return verdicts


def fact(kind: str, cycle: int = 0, **fields: object) -> str:
    """One launcher fact line, as the contract in docs/restart_agent.md spells it."""
    import json

    return (
        "[relaunch] fact: "
        + json.dumps({"fact": kind, "cycle": cycle, **fields}, separators=(",", ":"))
        + "\n"
    )
