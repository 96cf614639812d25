"""One hostile-path suite against every entry point of the file-safety path (issue 28
item 4, issue 26 item 3): the service's log path, MCP `analyze_log`, the log funnel, audit
artifacts, the Flight Recorder reader and secret files all open through
`restart_agent.safe_files`, and each must refuse the same tricks with its own one-line
error while nothing outside its root is read (or, for the funnel, written).

The rule the table below encodes (docs/service.md, "Paths: the symlink rule"):
- under a root (service, MCP, funnel: a path a client names): absolute, no `..`, lexically
  under the root, and no symlink below the root is followed, whether it points inside or
  outside; only regular files;
- a file the operator names (audit artifact, secret file): the operator's path, a final
  symlink is followed; FIFOs, devices, directories and files over the limit are refused
  before a byte is read; `relaunch fr` resolves the links named on its command line, and
  its reader (`read_dump`, the files found in a dump directory) follows none.

A cell of EXPECT is the substring the refusal must carry, FOLLOWED (the documented
operator rule: the file is read), or None (the case has no meaning there; the reason is in
NOT_APPLICABLE). Nothing here is mocked: real files, FIFOs, /dev/zero, symlinks, swaps;
the table's service row is also checked through a real `relaunch serve` over HTTP.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from relaunch.attribution.core import audit
from relaunch.attribution.fr import reader
from relaunch.attribution.mcp.server import _Tools
from relaunch.attribution.mcp.server import confine as mcp_confine
from relaunch.attribution.service.confined import confined_file
from relaunch.attribution.service.errors import ApiError
from relaunch.attribution.service.paths import confine as service_confine
from relaunch.launcher.funnel.paths import PathRejected
from relaunch.launcher.funnel.paths import confine as funnel_confine
from relaunch.launcher.funnel.paths import open_confined as funnel_open
from relaunch.restart_agent.secret_file import TokenFileError, read_token_file

SECRET = b"SECRET-OUTSIDE-THE-ROOT CUDA error: out of memory\n"
LIMIT = 64  # the size limit the root-less readers get in the over-size case
FOLLOWED = "FOLLOWED"
CASES = [
    "symlink_outside",
    "symlink_inside",
    "dotdot",
    "absolute_outside",
    "fifo",
    "device",
    "directory",
    "over_size",
    "swapped_after_check",
]
NOT_APPLICABLE = {
    "dotdot": "the operator names the file; `..` in it is the operator's",
    "absolute_outside": "no root: the operator names the file",
    "swapped_after_check": "one call: opened once, then checked on that descriptor",
    "over_size": "logs under a root are streamed (bounded by the analysis budget), not size-capped",
}

# entry point -> case -> what it gets
EXPECT: dict[str, dict[str, str | None]] = {
    "service": {
        "symlink_outside": "outside_allowed_root",
        "symlink_inside": "outside_allowed_root",
        "dotdot": "invalid_path",
        "absolute_outside": "outside_allowed_root",
        "fifo": "not_regular_file",
        "device": "not_regular_file",
        "directory": "not_regular_file",
        "over_size": None,
        "swapped_after_check": "outside_allowed_root",
    },
    "mcp": {
        "symlink_outside": "is a symlink (refused)",
        "symlink_inside": "is a symlink (refused)",
        "dotdot": "must not contain '..'",
        "absolute_outside": "outside the allowed roots",
        "fifo": "not a regular file",
        "device": "not a regular file",
        "directory": "not a regular file",
        "over_size": None,
        "swapped_after_check": "is a symlink (refused)",
    },
    "funnel": {
        "symlink_outside": "symlink 'link'",
        "symlink_inside": "symlink 'link'",
        "dotdot": "'..'",
        "absolute_outside": "outside the log root",
        "fifo": "not a regular file",
        "device": "not a regular file",
        "directory": "Is a directory",
        "over_size": None,
        "swapped_after_check": "symlink 'd'",
    },
    "audit": {
        "symlink_outside": FOLLOWED,
        "symlink_inside": FOLLOWED,
        "dotdot": None,
        "absolute_outside": None,
        "fifo": "not a regular file",
        "device": "not a regular file",
        "directory": "is a directory",
        "over_size": f"larger than {LIMIT} bytes",
        "swapped_after_check": None,
    },
    "fr": {
        "symlink_outside": "a symbolic link (not followed)",
        "symlink_inside": "a symbolic link (not followed)",
        "dotdot": None,
        "absolute_outside": None,
        "fifo": "not a regular file (a FIFO)",
        "device": "not a regular file (a device)",
        "directory": "not a regular file (a directory)",
        "over_size": f"over the {LIMIT}-byte limit",
        "swapped_after_check": None,
    },
    "secret": {
        "symlink_outside": FOLLOWED,
        "symlink_inside": FOLLOWED,
        "dotdot": None,
        "absolute_outside": None,
        "fifo": "is not a regular file",
        "device": "is not a regular file",
        "directory": "is not a regular file",
        "over_size": "is larger than",
        "swapped_after_check": None,
    },
}


@dataclass
class Tree:
    root: Path
    outside: Path
    secret: Path  # outside the root
    inner: Path  # a regular file inside the root

    def outside_untouched(self) -> None:
        """Nothing created or changed outside (the swap case plants one link there)."""
        names = {p.name for p in self.outside.iterdir()}
        assert names in ({"secret.log"}, {"secret.log", "inner.log"}), names
        assert "inner.log" not in names or (self.outside / "inner.log").is_symlink()
        assert self.secret.read_bytes() == SECRET


@pytest.fixture()
def tree(tmp_path: Path) -> Tree:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    secret = outside / "secret.log"
    secret.write_bytes(SECRET)
    inner = root / "d" / "inner.log"
    inner.write_bytes(SECRET.replace(b"OUTSIDE", b"INSIDE"))
    return Tree(root.resolve(), outside, secret, inner)


def _path_for(case: str, t: Tree) -> tuple[str, list[str]]:
    """The hostile path for `case` and the roots to confine it to."""
    roots = [str(t.root)]
    if case == "symlink_outside":
        os.symlink(t.secret, t.root / "link")
        return str(t.root / "link"), roots
    if case == "symlink_inside":
        os.symlink(t.inner, t.root / "link")
        return str(t.root / "link"), roots
    if case == "dotdot":
        return f"{t.root}/d/../../outside/secret.log", roots
    if case == "absolute_outside":
        return str(t.secret), roots
    if case == "fifo":
        os.mkfifo(t.root / "pipe")  # no writer: a blocking open would hang the test
        return str(t.root / "pipe"), roots
    if case == "device":
        return "/dev/zero", ["/dev"]  # an allowed root that holds a device
    if case == "directory":
        return str(t.root / "d"), roots
    if case == "over_size":
        big = t.root / "big"
        with open(big, "wb") as fh:
            fh.truncate(1 << 32)  # 4 GiB, sparse: read it and the test runs for minutes
        return str(big), roots
    if case == "swapped_after_check":
        return str(t.inner), roots
    raise AssertionError(case)


def _swap_dir_for_symlink(t: Tree) -> None:
    """root/d (checked) becomes a symlink to the outside directory holding the secret."""
    os.rename(t.root / "d", t.root / "d.old")
    os.symlink(t.outside, t.root / "d")
    os.symlink(t.secret, t.outside / "inner.log")  # what the checked path now reaches


# Each runner: (hostile path, roots, case, tree) -> the bytes it read (or the message it
# returned); raises the entry point's own error type to refuse.
Runner = Callable[[str, list[str], str, Tree], bytes]


def _service(path: str, roots: list[str], case: str, t: Tree) -> bytes:
    rs = [Path(r) for r in roots]
    service_confine(path, rs)  # POST /logs: the check when the path is named
    if case == "swapped_after_check":
        _swap_dir_for_symlink(t)
    with confined_file(path, rs) as fh:  # every later read (analysis, re-analysis)
        return fh.read()


def _mcp(path: str, roots: list[str], case: str, t: Tree) -> bytes:
    tools = _Tools(None, [Path(r) for r in roots], None)
    if case == "swapped_after_check":
        mcp_confine(path, tools.roots)
        _swap_dir_for_symlink(t)
    result = tools.analyze_log(path, None, None, False)
    return result.model_dump_json().encode()


def _funnel(path: str, roots: list[str], case: str, t: Tree) -> bytes:
    root = Path(roots[0])
    rel = path if case in ("dotdot", "absolute_outside") else os.path.relpath(path, root)
    funnel_confine(root, rel)  # the lexical check
    if case == "swapped_after_check":
        _swap_dir_for_symlink(t)
    fd, _ = funnel_open(root, rel)
    try:
        os.write(fd, b"written by the funnel\n")
    finally:
        os.close(fd)
    return b""


def _audit(path: str, roots: list[str], case: str, t: Tree) -> bytes:
    limit = LIMIT if case == "over_size" else audit.MAX_ARTIFACT_BYTES
    try:
        return audit.read_regular(path, limit)
    except (OSError, ValueError) as exc:  # load_artifact's mapping, the one the CLI prints
        raise audit.AuditFormatError(f"{path}: {exc}") from None


def _fr(path: str, roots: list[str], case: str, t: Tree) -> bytes:
    return reader._read_regular(path)


def _secret(path: str, roots: list[str], case: str, t: Tree) -> bytes:
    return read_token_file(path, "--token-file").encode()


RUNNERS: dict[str, tuple[Runner, type[Exception]]] = {
    "service": (_service, ApiError),
    "mcp": (_mcp, ToolError),
    "funnel": (_funnel, PathRejected),
    "audit": (_audit, audit.AuditFormatError),
    "fr": (_fr, reader.DumpError),
    "secret": (_secret, TokenFileError),
}


def _message(exc: Exception) -> str:
    if isinstance(exc, ApiError):
        return f"{exc.error_code}: {exc.message}"
    if isinstance(exc, PathRejected):
        return exc.message
    return str(exc)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("entry", sorted(RUNNERS))
def test_hostile_path(entry: str, case: str, tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    expect = EXPECT[entry][case]
    if expect is None:
        pytest.skip(f"{case} does not apply to {entry}: {NOT_APPLICABLE[case]}")
    monkeypatch.setattr(reader, "MAX_DUMP_BYTES", LIMIT)
    monkeypatch.setattr("relaunch.restart_agent.secret_file.MAX_TOKEN_BYTES", LIMIT)
    path, roots = _path_for(case, tree)
    run, error = RUNNERS[entry]
    if expect == FOLLOWED:  # the operator's own path: the documented rule reads it
        assert b"CUDA error" in run(path, roots, case, tree)
        tree.outside_untouched()
        return
    with pytest.raises(error) as info:
        run(path, roots, case, tree)
    message = _message(info.value)
    assert expect in message, message
    assert "\n" not in message  # one line
    assert "SECRET-OUTSIDE" not in message
    tree.outside_untouched()


def test_every_entry_point_has_a_row_for_every_case() -> None:
    """The table is complete: adding an entry point or a case means deciding each cell."""
    assert sorted(EXPECT) == sorted(RUNNERS)
    for entry, row in EXPECT.items():
        assert sorted(row) == sorted(CASES), entry
        for case, cell in row.items():
            assert cell is not None or case in NOT_APPLICABLE, (entry, case)
    # the confined entry points refuse every symlink below the root, inside or outside
    for entry in ("service", "mcp", "funnel"):
        assert EXPECT[entry]["symlink_inside"] not in (None, FOLLOWED)


def test_the_service_answers_the_same_over_http(tmp_path: Path) -> None:
    """The same cases through a real `relaunch serve` (uvicorn on loopback): `POST /logs`
    answers each with the error code of the table, never a body quoting the secret."""
    from tests._service_helpers import running_service

    t = Tree(tmp_path / "logs", tmp_path / "outside", tmp_path / "outside" / "secret.log", Path())
    t.outside.mkdir()
    t.secret.write_bytes(SECRET)
    paths: dict[str, str] = {}
    for case in ("symlink_outside", "symlink_inside", "dotdot", "absolute_outside", "fifo"):
        sub = t.root / case
        (sub / "d").mkdir(parents=True)
        t.inner = sub / "d" / "inner.log"
        t.inner.write_bytes(b"[rank0]: ValueError: inside\n")
        paths[case], _ = _path_for(case, Tree(sub, t.outside, t.secret, t.inner))
    paths["directory"] = str(t.root / "fifo" / "d")
    paths["device"] = "/dev/zero"
    service = running_service(tmp_path, root=t.root, extra_args=["--allowed-root", "/dev"])
    with service as svc, svc.client() as c:
        for case, path in sorted(paths.items()):
            resp = c.post("/logs", json={"log_path": path, "analysis_intent": "terminal"})
            body = resp.json()
            assert body.get("error_code") == EXPECT["service"][case], (case, body)
            assert resp.status_code in (400, 403), (case, resp.status_code)
            assert "SECRET-OUTSIDE" not in resp.text
    t.outside_untouched()
