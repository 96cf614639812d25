"""Races against the file-safety path (issue 26, items 3 and 11): `relaunch mcp`'s
`analyze_log` during directory and symlink swaps never reads a file outside its root.

The tool implementation is called as the MCP server calls it (`_Tools.analyze_log`, in
worker threads) while a thread swaps, as fast as it can, a directory on the path and the
file itself for symlinks to a secret outside `--allowed-root`. Each call either analyses
the real file or is refused with a one-line ToolError; none may quote the secret. Bounded:
400 calls, whatever the machine's speed.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

from relaunch.attribution.mcp.server import _Tools

CALLS = 400


_libc = ctypes.CDLL(None, use_errno=True)
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE): each state holds half the time."""
    if _libc.renameat2(_AT_FDCWD, bytes(a), _AT_FDCWD, bytes(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _swapper(root: Path, outside: Path, stop: threading.Event, swaps: list[int]) -> None:
    """Swap the directory `d` with a symlink to `outside`, and `d/x.log` with a symlink to
    the outside file, until stopped."""
    (root / "d_link").symlink_to(outside)
    (root / "d" / "x_link").symlink_to(outside / "x.log")
    n = 0
    while not stop.is_set():
        _exchange(root / "d", root / "d_link")
        _exchange(root / "d", root / "d_link")
        _exchange(root / "d" / "x.log", root / "d" / "x_link")
        _exchange(root / "d" / "x.log", root / "d" / "x_link")
        n += 1
        stop.wait(0.001)  # some time in the good state: some calls read the real file
    swaps.append(n)


def test_analyze_log_during_swaps_leaks_nothing(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (root / "d" / "x.log").write_text("[rank0]: ValueError: inside the root\n")
    (outside / "x.log").write_text("[rank0]: ValueError: SECRET-OUTSIDE\n")
    tools = _Tools(None, [root], None)
    stop, swaps = threading.Event(), []  # type: ignore[var-annotated]
    t = threading.Thread(target=_swapper, args=(root, outside, stop, swaps))
    t.start()
    ok = refused = leaked = 0
    try:
        for _ in range(CALLS):
            try:
                result = tools.analyze_log(str(root / "d" / "x.log"), None, None, False)
            except ToolError as exc:
                assert "\n" not in str(exc)
                refused += 1
                continue
            text = json.dumps(result.verdict)
            leaked += "SECRET" in text
            ok += "inside the root" in text
    finally:
        stop.set()
        t.join(60)
    assert leaked == 0
    assert ok + refused == CALLS and swaps and swaps[0] > 0
    # swaps over: the same call reads the real file (refusals above were the swaps')
    after = tools.analyze_log(str(root / "d" / "x.log"), None, None, False)
    assert "inside the root" in json.dumps(after.verdict)
