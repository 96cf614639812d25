"""The speed machinery changes no result.

The line gate (restart_agent.linegate), the row-selection and fingerprint caches
(restart_agent.rowcache), the windowed progress search and the bounded rank parser must
give the same `CycleEvidence` as a slow reference that feeds the log one line at a time
with the gate open and the row cache off (the evidence memos of restart_agent.lines too),
on the benchmark's noisy and dense shapes (small sizes), the default shape, the fixture
logs and hand-made edge cases. Plus: the literals derived from a regex are really needed
by it, and huge rank numbers do not raise.
"""

from __future__ import annotations

import importlib.util
import random
import re
from pathlib import Path

import pytest

import relaunch.restart_agent as ra
import relaunch.restart_agent.lines as lines_mod
from relaunch.restart_agent import fingerprint as _fp
from relaunch.restart_agent import rowcache
from relaunch.restart_agent.frames import MAX_FRAMES, Span, Trace
from relaunch.restart_agent.linegate import LineGate
from relaunch.restart_agent.lines import READS
from relaunch.restart_agent.model import CycleEvidence
from relaunch.restart_agent.outcomes import LINE_REGEXES, digit_blind
from relaunch.restart_agent.prefixes import MAX_RANK_DIGITS
from relaunch.restart_agent.ranks import RankCollector, bounded_ranks
from relaunch.restart_agent.registry import END, default_registry, regex_needles
from relaunch.restart_agent.rowcache import RowSelector
from tests._agent_helpers import LOGS, ROOT, make_logs, native_installed, scan_chunked


def _shapes():  # bench/log_shapes.py loaded from its path
    spec = importlib.util.spec_from_file_location("log_shapes", ROOT / "bench" / "log_shapes.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _OpenGate(LineGate):
    def skip(self, raw: bytes) -> bool:
        return False

    def skip_masked(self, key: bytes) -> bool:
        return False


class _UncachedSelector(RowSelector):
    """The rule row by row: a row is tried when one of its triggers (whose first prefilter
    literal is among the hints, if any) and one of its requires (if any) are in the line."""

    def rows_for(self, body, hints):  # same signature as the parent
        minimal = default_registry().prefilter

        def reached(t: str) -> bool:
            return t in body and (hints is None or next(k for k in minimal if k in t) in hints)

        return [
            row
            for row in self.rows
            if any(reached(t) for t in row.triggers)
            and (not row.requires or any(r in body for r in row.requires))
        ]


def reference(data: bytes) -> CycleEvidence:
    """Line by line, every line handed to the interpreter's full path (`line()`, no frame
    shortcut or span, no outcome known by digit mask, no remembered prefix split), nothing
    cached (fingerprints neither)."""
    s = ra.LogScanner()
    s._gate = _OpenGate(s.registry)
    s._interp._selector = _UncachedSelector(s.registry)
    s._interp.frame = lambda raw, lineno: False  # type: ignore[method-assign]
    s._interp.frame_head = lambda head: None  # type: ignore[method-assign] # no frame spans
    s._interp.known = lambda raw, masked, lineno, hints: False  # type: ignore[method-assign]
    s._interp._split_by_head = lambda text, hints: None  # type: ignore[method-assign]
    memo = lines_mod.fingerprint, lines_mod._facts, lines_mod._entity
    lines_mod.fingerprint = _fp.fingerprint
    lines_mod._facts = lines_mod.frame_facts  # frame facts and entities: not remembered
    lines_mod._entity = _fp.entity_of
    try:
        for line in data.splitlines(keepends=True):
            s.feed(line)
        return s.finish()
    finally:
        lines_mod.fingerprint, lines_mod._facts, lines_mod._entity = memo


def _write(tmp_path: Path, name: str, writer, size: int) -> bytes:
    path = tmp_path / name
    writer(path, size, ranks=64, seed=3)
    return path.read_bytes()


EDGE = b"".join(
    [
        b"[rank1]: /x/y.py:12: UserWarning: packing is error-prone; errors='ignore' used\n",
        b"[rank2]: /x/y.py:13: UserWarning: ErrorCode.from_status(3) unsupported\n",
        b"[rank3]: UserWarning: bad ErrorCode\n",  # ends with "ErrorCode": not "...Error"$
        b"[rank4]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError   \n",
        b"[rank5]: exitcode  : -9 (pid: 77)\n[rank6]: exitcode  : -1 (pid: 78)\n",
        b"[rank7]: got Signal 9 (SIGKILL) error\n[rank8]: got Signal 1 error\n",
        b"[rank9]: CUDA err\x00or: misaligned address\n",  # NUL removed by line(): matches
        b"[rank10]: 10%|#| 1/10\r[rank10]: CUDA error: misaligned\raddress error\n",
        b"[rank11]: \xe2\x80\x83KeyError: 'caf\xc3\xa9'\xc2\xa0\n",  # non-ASCII spaces
        b"[rank12]: Traceback (most recent call last): error\n",
        b"[rank12]: ValueError: x\n",
        b"[rank13]: errorreempted by the scheduler\n",
        b"[rank14]: " + b"e" * 70_000 + b" rror RuntimeError: boom\n",
        b"0: RuntimeError: srun prefix\n",
        # torch elastic's summary: the rank/exitcode lines match no row but name the rank
        b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n",
        b"Root Cause (first observed failure):\n[0]:\n  time      : 2026-12-02_10:21:19\n",
        b"  host      : node001\n  rank      : 5 (local_rank: 5)\n",
        b"  exitcode  : -9 (pid: 3005)\n  error_file: <N/A>\n",
        b"  traceback : Signal 9 (SIGKILL) received by PID 3005\n",
        b'[relaunch] fact: {"event": "exit", "rank": 3, "exitcode": -9}\n',
        # traceback frames: the frame shortcut must treat each exactly as line() does
        b'[stderr][rank2]:   File "/w/a.py", line 3, in f\n[rank2]: RuntimeError: two\n',
        b'[relaunch]   File "/w/a.py", line 3 rank=4\n[relaunch] RuntimeError: rank=4 x\n',
        b'7:   File "/w/b.py", line 9, in g\n7: ValueError: bad 0x1f and 3x4096 at 0x00\n',
        b'[rank5]: xFile "/w/c.py", line 1\n[rank5]:   File "/w/c.py", line 2, in h\n',
        b'[rank6]:   File "' + b"a" * 1200 + b'", line 1\n',
        b'[rank6]:   File "/w/d.py", line 2, rank 3\n',
        b"[rank6]: " + b" " * 300 + b'File "/w/e.py", line 4\n',
        b'[rank6]:   File "/w/\xc3\xa9.py", line 5, in \xe2\x80\x83k\xc2\xa0\n',
        b'[rank6]: \xc3\xa9 File "/w/f.py", line 6\n',
        b'[rank4]:   File "/w/p\x00.py", line 1\n[rank4]:   File "/w/p.py", line 1\rx\n',
        b'[rank4]:   File "/w/q.py", line 2\r[rank4]:   File "/w/r.py", line 3\n',
        b'[rank3]:\r  File "/w/s.py", line 7\nValueError: unranked\n[rank3]: ValueError: 3\n',
        b"[rank6]: RuntimeError: boom\n[rank5]: RuntimeError: boom\n[rank4]: KeyError: 'k'\n",
        # prefix splits remembered per head (text up to the line's one trigger)
        b"[rank8]: 12 RuntimeError: x\n[rank8]: 12: RuntimeError: y\n",
        b"[rank9]:[relaunch] RuntimeError rank=3\n[rank9]:  [launcher] Exception rank=2\n",
        b"[default3]:[rank12]: KeyError: 'w'\n[default3]:[rank13]: KeyError: 'w'\n",
        b"RuntimeError: no prefix\n  RuntimeError: spaced\n",
        # traceback blocks (restart_agent.blocks) and frame spans: each as line() reads it
        b'[rank 3]:   File "/w/a.py", line 1, in f\n[rank 3]:     f()\n',  # `rank ` in heads
        b"[rank 3]: RuntimeError: launcher prefix 0x7f00 and 12x4\n",
        b'[rank 4]:   File "/w/rank .py", line 1, in f\n[rank 4]: RuntimeError: x\n',
        b'[rank5]:   File "/w/a.py", line 1\n[rank6]:   File "/w/a.py", line 2\n',
        b"[rank6]: RuntimeError: heads of two ranks before me\n",
        b'[rank7]:   File "/w/a.py", line 3\n[rank7]: RuntimeError: got Signal 9 from c10d\n',
        b'[rank8]:   File "/w/a.py", line 3\n[rank8]: RuntimeError: got Signal 8 from c11d\n',
        b'[rank9]:   File "/w/' + b"x" * 600 + b'.py", line 4\n[rank9]: KeyError: 9\n',
        b'[rank10]:   File "/w/a.py", line 5\n[rank10]: xitcode in the error line: 1\n',
        b'[rank11]:   File "/w/a.py", line 6\n[rank11]:   File "/w/errors.py", line 7\n',
        b"[rank11]: ValueError: after a frame line with a trigger\n",
        b'3: [rank12]:   File "/w/a.py", line 8\n3: [rank12]: ValueError: stacked 1\n',
        b'[rank13]:   File "/w/a.py", line 9\n[rank14]: ValueError: another rank\n',
        b'[rank15]:   File "/w/a.py", line 9\n[rank15]: UserWarning: error-prone\n',
        b'[rank15]:   File "/w/a.py", line 10\n[rank15]: Root Cause error\n',
        b'[rank16]:   File "/w/a.py", line 9\n[rank16]: srun: error: n1: task 16: Exited\n',
        b'  File "/w/a.py", line 1, in <module>\nValueError: unprefixed block\n',
    ]
)


def _corpus(tmp_path: Path) -> dict[str, bytes]:
    shapes = _shapes()
    out = {
        "noisy": _write(tmp_path, "noisy.log", shapes.write_noisy, 600_000),
        "dense": _write(tmp_path, "dense.log", shapes.write_dense, 600_000),
        "edge": EDGE,
    }
    default = tmp_path / "default.log"
    make_logs().write_log(default, 400_000, ranks=64, seed=2, block_lines=800, distinct_blocks=3)
    out["default"] = default.read_bytes()
    for p in sorted(LOGS.glob("*.log")):
        out[p.name] = p.read_bytes()
    return out


BACKENDS = [
    pytest.param(
        "1",
        id="native",
        marks=pytest.mark.skipif(
            not native_installed(), reason="hyperscan is not installed (no wheel for this platform)"
        ),
    ),
    pytest.param("0", id="stdlib"),
]


@pytest.mark.parametrize("native", BACKENDS)
def test_fast_scan_equals_the_slow_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: str
) -> None:
    """With either literal-search backend (restart_agent.multiscan); the reference always
    uses the stdlib one."""
    for name, data in _corpus(tmp_path).items():
        path = tmp_path / f"{name}.scan"
        path.write_bytes(data)
        monkeypatch.setenv("RELAUNCH_NATIVE_SCAN", native)
        fast = ra.scan_file(path)
        chunked = scan_chunked(data, [65_536, 7, 1_000_003])
        monkeypatch.setenv("RELAUNCH_NATIVE_SCAN", "0")
        assert fast == reference(data), name
        assert chunked == fast, name


def test_reference_really_differs_from_a_broken_gate(tmp_path: Path) -> None:
    """The comparison can fail: a gate that drops every line loses the evidence."""

    class _Closed(LineGate):
        def skip(self, raw: bytes) -> bool:
            return True

        def skip_masked(self, key: bytes) -> bool:
            return True

    s = ra.LogScanner()
    s._gate = _Closed(s.registry)
    s.feed(EDGE)
    assert s.finish() != reference(EDGE)


def test_noise_lines_never_reach_the_interpreter(tmp_path: Path) -> None:
    data = _write(tmp_path, "noisy.log", _shapes().write_noisy, 300_000)
    s = ra.LogScanner()
    seen: list[bytes] = []
    original = s._interp.line

    def spy(raw: bytes, lineno: int, hints: set[str] | None = None) -> None:
        seen.append(raw)
        original(raw, lineno, hints)

    s._interp.line = spy  # type: ignore[method-assign]
    s.feed(data)
    ev = s.finish()
    assert ev.primary.failure_class == "cuda_illegal_memory_access"
    assert not [r for r in seen if b"UserWarning" in r or b"Warning: error_handler" in r]
    warnings = data.count(b"UserWarning") + data.count(b"Warning: error_handler")
    assert warnings > 300 and len(seen) < 400  # the failure tail, not the noise


@pytest.mark.parametrize(
    ("line", "skipped"),
    [
        (b"[rank1]: /a.py:3: UserWarning: this is error-prone", True),
        (b"[rank1]: open(p, errors='ignore') dropped 3 bytes", True),
        (b"[rank1]: /a.py:3: UserWarning: ErrorCode 7 from the error_handler", True),
        (b"[rank1]: RuntimeError: CUDA error: misaligned address", False),
        (b"[rank1]: KeyError: 'w'", False),
        (b"[rank1]: something FooError", False),
        (b"[rank1]: something FooError \t ", False),
        (b'[rank1]:   File "/w/t.py", line 3, in <module> error', False),
        (b"[rank1]: an error\x00 here", False),
        (b"[rank1]: an error\rCUDA error: x", False),
        (b"[rank1]: an error \xc2\xa0", False),
        (b"  rank      : 5 (local_rank: 5) error_file", False),
        (b'[relaunch] fact: {"event": "exit", "error": 1}', False),
    ],
)
def test_line_gate(line: bytes, skipped: bool) -> None:
    gate = LineGate(default_registry(), READS)
    assert gate.skip(line) is skipped
    assert gate.skip(line) is skipped  # cached answer


@pytest.mark.parametrize(
    ("pattern", "needles"),
    [
        (r"^(?:\w+\.)*(?P<msg>KeyError: .*)", {"KeyError: "}),
        (r"[Ee]rror", {"Error", "error"}),
        (r"(?:ab|cd)ef", {"abef", "cdef"}),
        (r"\d+ milliseconds", {" milliseconds"}),
        (r"x(?:yz)?w", {"x"}),
        (r"[A-Z]\w*Error$", {"Error" + END}),
        (r"a|b.*", {"a", "b"}),
        (r"(?i)error", None),
        (r".*", None),
        (r"\s*$", None),
    ],
)
def test_regex_needles(pattern: str, needles: set[str] | None) -> None:
    got = regex_needles(re.compile(pattern))
    assert (set(got) if got is not None else None) == needles


def _holds(text: str, needle: str) -> bool:
    if needle.endswith(END):
        return text.endswith(needle[:-1])
    return needle in text


def test_every_row_example_holds_a_needle_of_its_regex() -> None:
    checked = 0
    for row in default_registry().patterns:
        needles = regex_needles(row.regex)
        if needles is None:
            continue
        for ex in row.examples:
            body = ex.strip()
            if row.regex.search(body):
                assert any(_holds(body, n) for n in needles), (row.id, ex, needles)
                checked += 1
    assert checked > 50


def test_needles_hold_on_random_text() -> None:
    """Fuzz: whenever a row's regex matches mutated example text, a needle is in it."""
    rnd = random.Random(7)
    rows = [r for r in default_registry().patterns if regex_needles(r.regex)]
    alphabet = "aeErorx0129 :.'\"()[]-_"
    for _ in range(3000):
        row = rnd.choice(rows)
        text = rnd.choice(row.examples) if row.examples else ""
        for _ in range(rnd.randint(0, 4)):
            i = rnd.randrange(len(text) + 1)
            text = text[:i] + "".join(rnd.choices(alphabet, k=rnd.randint(0, 3))) + text[i + 1 :]
        text = text.strip()
        if row.regex.search(text):
            assert any(_holds(text, n) for n in regex_needles(row.regex)), (row.id, text)


def test_huge_rank_numbers_are_no_ranks() -> None:
    assert bounded_ranks([b"7", b"0007", b"9" * 5000, str(2**64).encode()]) == {7}
    top = b"9" * MAX_RANK_DIGITS
    assert bounded_ranks([top, top + b"9", b"0" + top]) == {int(top)}
    rc = RankCollector()
    rc.region(b"\n[rank0]: a\n[rank" + b"9" * 5000 + b"]: b\n" + str(2**64).encode() + b": c\n")
    assert rc.ranks == {0}
    ev = ra.LogScanner()
    ev.feed(b"[rank1]: hello\n[rank" + b"9" * 5000 + b"]: hi\n18446744073709551616: hey\n")
    assert ev.finish().ranks_seen == [1]


def test_caches_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import relaunch.restart_agent.linegate as lg
    import relaunch.restart_agent.rowcache as rc

    monkeypatch.setattr(lg, "MAX_CACHE", 50)
    monkeypatch.setattr(rc, "MAX_CACHE", 50)
    rc._FINGERPRINTS.clear()
    s = ra.LogScanner()
    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa"]
    rnd = random.Random(1)
    lines = []
    for i in range(600):
        w = " ".join(rnd.choices(words, k=4))
        lines.append(f"[rank{i % 8}]: UserWarning: {w} is error-prone\n")
        lines.append(f"[rank{i % 8}]: RuntimeError: {w} failed\n")
    s.feed("".join(lines).encode())
    ev = s.finish()
    assert ev.root_lines == 600
    assert 0 < len(s._gate._cache) <= 50
    assert 0 < len(s._interp._selector._cache) <= 50
    assert 0 < len(rc._FINGERPRINTS) <= 50


def test_the_gate_keeps_every_row_example() -> None:
    """Each example line of the pattern table (as a rank-prefixed log line, with its digits
    changed too) reaches the interpreter."""
    gate = LineGate(default_registry(), READS)
    kept = 0
    for row in default_registry().patterns:
        for ex in row.examples:
            if not row.regex.search(ex.strip()):
                continue
            for line in (ex, ex.translate(str.maketrans("0123456789", "5678901234"))):
                raw = b"[rank3]: " + line.encode("utf-8")
                if row.regex.search(line.strip()):
                    assert not gate.skip(raw), (row.id, line)
                    kept += 1
    assert kept > 100


def test_fingerprint_memo_is_exact() -> None:
    """The memo keys a message by its digits masked; the masks must treat digits alike, with
    the 0 of `0x` as the only literal digit (kept when the message holds `0x`)."""
    import re._parser as sre  # the parse tree of the fingerprint masks

    def literal_digits(items) -> list[str]:  # sre parse items
        out = []
        for op, av in items:
            if op is sre.LITERAL and chr(av).isdigit():
                out.append(chr(av))
            elif op in (sre.SUBPATTERN, sre.MAX_REPEAT, sre.MIN_REPEAT, sre.ATOMIC_GROUP):
                out += literal_digits(av[-1])
            elif op is sre.BRANCH:
                for alt in av[1]:
                    out += literal_digits(alt)
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                out += literal_digits(av[1])
            elif op is sre.GROUPREF:
                out.append("backreference")
        return out

    found = [d for rx, _ in _fp._MASKS for d in literal_digits(sre.parse(rx.pattern))]
    assert found == ["0"]
    rnd = random.Random(5)
    messages = [
        "mat1 and mat2 shapes cannot be multiplied (511x2 and 3x4096)",
        "bad pointer 0x7f3a00 and 0x0 at 10x10, 2026-12-02 10:21:19.123 rank 7",
        "NCCL error in: ../NCCLUtils.hpp:219, 2.19.3 from 10.1.2.3:29500 deadbeef12",
        "KeyError: 'layers.84.mlp.weight_6' pid=3005 1e-06 -3.5E+2 ts 10:00:01",
    ]
    for _ in range(400):
        base = rnd.choice(messages)
        msg = "".join(rnd.choice("0123456789") if c.isdigit() else c for c in base)
        assert rowcache.fingerprint("c", msg) == _fp.fingerprint("c", msg), msg
    assert rowcache.fingerprint("c", "3x4096") != rowcache.fingerprint("c", "0x4096")


def test_frame_shortcut_matches_line(tmp_path: Path) -> None:
    """Tracebacks of many ranks (dense shape) go over as blocks (restart_agent.blocks:
    frames and error line together, by their digit mask), and the evidence that takes
    those frames as context is the reference's."""
    data = _write(tmp_path, "dense.log", _shapes().write_dense, 200_000)
    s = ra.LogScanner()
    taken: list[bool] = []
    take = s._blocks.take

    def spy(*args: object) -> bool:
        ok = take(*args)  # type: ignore[arg-type]
        taken.append(ok)
        return ok

    s._blocks.take = spy  # type: ignore[method-assign]
    s.feed(data)
    ev = s.finish()
    tracebacks = data.count(b"Traceback (most recent call last):")
    assert sum(taken) > 0.9 * tracebacks > 100
    assert ev == reference(data)
    assert any(e.context and e.user_frame for e in ev.roots)


@pytest.mark.parametrize(
    ("pattern", "blind"),
    [
        (r"\d+ ran for (?P<n>\d{1,8}) ms", True),
        (r"[0-9a-fA-F]{8,}|\w+|\s\S", True),
        (r"[^\]]{0,80}?Rank (\d+)\]", True),
        (r"Xid (?P<x>79\b.*)", False),  # a literal digit
        (r"code [1-9]\d*", False),  # a range holding some digits
        (r"(\d)\1", False),  # a backreference compares digits
        (r"(?>\d+)x", False),  # not looked into
    ],
)
def test_digit_blind(pattern: str, blind: bool) -> None:
    assert digit_blind(re.compile(pattern)) is blind


def test_outcomes_rest_on_digit_blind_regexes() -> None:
    """The regexes line() runs besides the rows' are blind, and a blind row matches a line
    with its digits changed at the same offsets (what `restart_agent.outcomes` relies on)."""
    assert all(digit_blind(rx) for rx in LINE_REGEXES)
    rnd = random.Random(7)
    checked = 0
    for row in default_registry().patterns:
        if not digit_blind(row.regex):
            continue
        for ex in row.examples:
            for _ in range(5):
                other = "".join(rnd.choice("0123456789") if c.isdigit() else c for c in ex)
                a, b = row.regex.search(ex), row.regex.search(other)
                assert (a is None) == (b is None), (row.id, ex, other)
                if a is not None and b is not None:
                    assert a.regs == b.regs, (row.id, ex, other)
                    checked += 1
    assert checked > 200


def test_trace_keeps_what_one_by_one_appending_keeps() -> None:
    """`Trace` with single frames and spans mixed gives the first frame and the last
    MAX_FRAMES, as appending each frame and dropping the second when over would."""
    rnd = random.Random(3)
    for _ in range(300):
        trace, plain = Trace(), []
        lineno = 1
        for _ in range(rnd.randrange(1, 12)):
            if rnd.random() < 0.5:
                trace.add(lineno, f"f{lineno}")
                plain.append((lineno, f"f{lineno}"))
                lineno += 1
            else:
                n = rnd.randrange(1, 9)
                lines = [b'[rank1]:   File "x", line %d' % (lineno + i) for i in range(n)]
                trace.add_span(Span(lineno, b"\n".join(lines), 11, n))
                plain += [(lineno + i, lines[i][11:]) for i in range(n)]
                lineno += n
        want = plain if len(plain) <= MAX_FRAMES + 1 else plain[:1] + plain[-MAX_FRAMES:]
        assert trace.frames() == want
        assert trace.count <= 2 * (MAX_FRAMES + 1) + 8
