"""Fuzz and attack cases for the inputs issue 26 names (items 2, 3, 7-10), bounded in time.

What each bad input gets:
- a fuzzed worker datagram (1,000 random ones): a typed, bounded message or None; no
  string in it can start a line; never an exception;
- a fuzzed fact line (1,000): ignored unless signed with the key in force; never a crash;
- a FIFO, /dev/zero, a symlink below the root, a file over the limit: refused by
  `restart_agent.safe_files` with a typed error, the oversize one before a byte is read
  (the process's read counter, /proc/self/io `rchar`, does not move); the same for `fr`;
- an audit artifact with a key twice or a number spelled otherwise: `AuditFormatError`;
- launcher numbers far out of range, a deep YAML: a one-line error, exit 2.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from relaunch.launcher import facts as launcher_facts
from relaunch.launcher.heartbeat_message import clean_message
from relaunch.restart_agent import safe_files
from relaunch.restart_agent.facts import FactCollector, verifying
from tests._launcher_helpers import relaunch_env

_ATOMS = [None, True, 0, -1, 2**70, 1.5, float("inf"), "", "x", "\n", "\u2028", "\x1b[2J",
          "[relaunch] fact: {}", "\ud800", [], {}, [1, "2"], {"a": 1}]  # fmt: skip
_KEYS = ["r", "c", "k", "t", "o", "s", "i", "ckpt", "n", "sec", "zz"]
_KINDS = ["hello", "hb", "sec_start", "sec_end", "progress", "strag", "sync", "x"]


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar")


def test_fuzzed_datagrams_are_typed_bounded_and_one_line() -> None:
    rnd = random.Random(26)
    kept = 0
    for _ in range(1000):
        msg = {k: rnd.choice(_ATOMS) for k in rnd.sample(_KEYS, rnd.randrange(len(_KEYS)))}
        if rnd.random() < 0.7:
            msg.update(r=rnd.randrange(-2, 9), k=rnd.choice(_KINDS), c=rnd.choice([0, -1, "0"]))
        out = clean_message(msg)
        if out is None:
            continue
        kept += 1
        assert isinstance(out["r"], int) and 0 <= out["r"] <= 10_000_000
        for key in ("o", "s", "ckpt"):
            v = out.get(key)
            assert v is None or (isinstance(v, str) and len(v.splitlines()) <= 1)
            assert v is None or "\x1b" not in v
        assert "i" not in out or (type(out["i"]) is int and 0 <= out["i"] <= 2**62)
    assert 100 < kept < 1000  # both kinds were exercised


def test_fuzzed_fact_lines_count_only_when_signed() -> None:
    rnd = random.Random(27)
    key = launcher_facts.cycle_key(0)  # the key of cycle 0's facts
    good = "[relaunch] " + launcher_facts.cycle_end(0, "failed", 1.0)
    with verifying([key]):
        c = FactCollector()
    counted = 0
    for n in range(1000):
        body = {"fact": rnd.choice(["cycle_end", "rank_exit", "hang", "iterations", "x"]),
                "cycle": rnd.choice(_ATOMS), "rank": rnd.choice(_ATOMS),
                "outcome": rnd.choice(["succeeded", None]), "mac": "0" * 32}  # fmt: skip
        text = "[relaunch] fact: " + json.dumps(body)[: rnd.randrange(1, 400)]
        counted += c.line(text, n)
    assert counted == 0 and c.line(good, 1001)
    assert c.result().outcome == "failed"  # type: ignore[union-attr]


def test_file_safety_refuses_fifos_devices_symlinks_and_oversize(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    (root / "d" / "ok.log").write_bytes(b"x" * 10)
    os.mkfifo(root / "fifo")
    (root / "link").symlink_to(root / "d")  # a symlink that stays inside: refused too
    big = root / "big.log"
    with open(big, "wb") as fh:
        fh.truncate(3 << 30)  # sparse: 3 GiB that would take seconds to read
    assert safe_files.read_confined(root / "d" / "ok.log", [root], 100) == b"x" * 10
    cases = [
        (lambda: safe_files.open_confined(root / "fifo", [root]), safe_files.NotRegularFile),
        (lambda: safe_files.open_confined(root / "link" / "ok.log", [root]), safe_files.SymlinkRefused),
        (lambda: safe_files.open_confined(tmp_path / "x", [root]), safe_files.OutsideRoot),
        (lambda: safe_files.read_bounded("/dev/zero", 10), safe_files.NotRegularFile),
        (lambda: safe_files.read_bounded(root / "d", 10), IsADirectoryError),
        (lambda: safe_files.read_confined(root / "missing", [root], 10), FileNotFoundError),
    ]  # fmt: skip
    for call, error in cases:
        with pytest.raises(error):
            call()
    before = _rchar()
    with pytest.raises(safe_files.TooLarge):
        safe_files.read_bounded(big, 1 << 20)
    from relaunch.attribution.fr.reader import DumpError, read_dump

    with pytest.raises(DumpError, match="over the"):
        read_dump(big, rank=0)
    assert _rchar() - before < 1 << 20  # refused before reading: not a GiB read


def test_audit_refuses_duplicate_keys_and_non_canonical_numbers(tmp_path: Path) -> None:
    from relaunch.attribution.core.audit import AuditFormatError, load_artifact, parse_strict

    assert parse_strict('{"a": [1, 2.5, -3, 1e-07]}') == {"a": [1, 2.5, -3, 1e-07]}
    for text, why in (
        ('{"schema": "relaunch.audit/1", "decision": "STOP", "decision": "RESTART"}', "duplicate"),
        ('{"schema": "relaunch.audit/1", "x": 1.50}', "non-canonical number"),
        ('{"schema": "relaunch.audit/1", "x": 1E2}', "non-canonical number"),
        ('{"schema": "relaunch.audit/1", "x": -0}', "non-canonical integer"),
        ('{"schema": "relaunch.audit/1", "x": "\\ud800"}', "surrogate"),
    ):
        path = tmp_path / "a.json"
        path.write_text(text)
        with pytest.raises(AuditFormatError, match=why):
            load_artifact(path)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--nproc-per-node", "10" * 15], "--nproc-per-node"),
        (["--max-restarts", "1" + "0" * 30], "must be at most"),
        (["--max-restarts", "2000000"], "must be at most 1000000"),
        (["--rdzv-conf", "read_timeout=" + "1" + "0" * 30], "must be a finite number"),
        (["--nnodes", "1:" + "9" * 40], "--nnodes"),
    ],
)
def test_launcher_numbers_are_one_line_errors(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "x.py").write_text("pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "run", *args, "--ft-gpu-health", "off", "x.py"],
        cwd=tmp_path, env=relaunch_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 3  # usage lines at most, one error line


def test_deep_yaml_is_a_one_line_error(tmp_path: Path) -> None:
    cfg = tmp_path / "deep.yaml"
    cfg.write_text("a: " + "[" * 20_000 + "]" * 20_000 + "\n")
    (tmp_path / "x.py").write_text("pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "run", "--ft-cfg-path", str(cfg), "x.py"],
        cwd=tmp_path, env=relaunch_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "nested deeper than 64 levels" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_analyze_json_escapes_c1_bidi_and_separators() -> None:
    from relaunch.cli.analyze_cmd import json_for_terminal

    value = {"text": "a\u0085b\u202ec\u2028d\u009be\ud800"}
    out = json_for_terminal(json.dumps(value, ensure_ascii=False))
    assert json.loads(out) == value  # the same JSON value
    assert all(not (0x80 <= ord(ch) < 0xA0 or ch in "\u202e\u2028") for ch in out)
    out.encode("utf-8")  # no lone surrogate left: printable on any UTF-8 stream
