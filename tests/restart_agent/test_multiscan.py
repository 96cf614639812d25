"""relaunch.restart_agent.multiscan: both literal-search backends give the same occurrences.

The native backend (Hyperscan) and the stdlib one (`re` passes per first byte, `rfind`
chains) must report the same (end offset, literal) pairs and the same `once` literals on
any text whose occurrences do not overlap; where two occurrences overlap the native one
reports both (the stdlib passes, like `grep -o`, the leftmost). The rank detector's native
search finds what its regex finds.
"""

from __future__ import annotations

import random

import pytest

from relaunch.restart_agent.multiscan import NativeScan, StdlibScan, literal_scan, native_search
from relaunch.restart_agent.ranks import RankCollector
from relaunch.restart_agent.registry import default_registry
from tests._agent_helpers import native_installed

needs_native = pytest.mark.skipif(
    not native_installed(), reason="hyperscan is not installed (no wheel for this platform)"
)

EVERY = tuple(sorted({t.encode() for t in default_registry().prefilter}))
ONCE = (b'File "', b"step", b"iteration", b"checkpoint", b"Xid")  # Xid: in both


def _hyperscan():
    import hyperscan

    return hyperscan


def _text(seed: int, n: int) -> bytes:
    """Random lines of filler and literals, separated by ` ~ ` (in no literal): a plain
    space could join two words into a third literal overlapping them (`Killed process` +
    `rank      : ` holds `rocess rank `), where the backends differ by design."""
    rnd = random.Random(seed)
    words = [*EVERY, *ONCE, b"error", b"Err", b"rr", b"SIG", b"Signal 1", b"a", b"x" * 40]
    out = [b"\n"]
    for _ in range(n):
        out.append(b" ~ ".join(rnd.choice(words) for _ in range(rnd.randrange(0, 6))) + b"\n")
    return b"".join(out)


def _expected(text: bytes, every: tuple[bytes, ...], once: tuple[bytes, ...]):
    hits = sorted(
        (p + len(lit), i)
        for i, lit in enumerate(every)
        for p in range(len(text))
        if text.startswith(lit, p)
    )
    return hits, {i for i, lit in enumerate(once) if lit in text}


@pytest.mark.parametrize("seed", range(6))
def test_stdlib_backend_reports_every_occurrence(seed: int) -> None:
    text = _text(seed, 300)
    hits, present = StdlibScan(EVERY, ONCE).scan(text)
    assert (sorted(hits), present) == _expected(text, EVERY, ONCE)


@needs_native
@pytest.mark.parametrize("seed", range(6))
def test_native_backend_reports_every_occurrence(seed: int) -> None:
    text = _text(seed, 300)
    hits, present = NativeScan(EVERY, ONCE, _hyperscan()).scan(text)
    assert (sorted(hits), present) == _expected(text, EVERY, ONCE)


@needs_native
def test_overlapping_occurrences() -> None:
    """`SIGBUSIGKILL` holds `SIGBUS` and, overlapping it, `SIGKILL`: the native pass reports
    both; the stdlib backend too when they start with different bytes (separate passes),
    but one regex pass for a shared first byte goes on after `SIGBUS` and misses `SIGKILL`
    (their one documented difference)."""
    text = b"\nkilled by SIGBUSIGKILL\n"
    every = (b"SIGBUS", b"BUSIG")
    native, _ = NativeScan(every, (), _hyperscan()).scan(text)
    stdlib, _ = StdlibScan(every, ()).scan(text)
    assert sorted(native) == sorted(stdlib) == [(17, 0), (19, 1)]
    same_first = (b"SIGBUS", b"SIGKILL")
    native, _ = NativeScan(same_first, (), _hyperscan()).scan(text)
    stdlib, _ = StdlibScan(same_first, ()).scan(text)
    assert sorted(native) == [(17, 0), (23, 1)]
    assert sorted(stdlib) == [(17, 0)]


def test_backend_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """`RELAUNCH_NATIVE_SCAN=0` selects the stdlib backend (what the tests' reference uses)."""
    monkeypatch.setenv("RELAUNCH_NATIVE_SCAN", "0")
    assert isinstance(literal_scan(EVERY, ONCE), StdlibScan)
    assert native_search(rb"\nx") is None
    monkeypatch.setenv("RELAUNCH_NATIVE_SCAN", "1")
    expected = NativeScan if native_installed() else StdlibScan
    assert isinstance(literal_scan(EVERY, ONCE), expected)


def test_the_native_rank_detector_is_built_only_for_large_regions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream fed in small pieces while ranks still appear would compile one database per
    new rank (~5 ms each, found in review): small regions use `re`, the native search comes
    with the first large region."""
    monkeypatch.setenv("RELAUNCH_NATIVE_SCAN", "1")
    r = RankCollector()
    for i in range(50):
        r.region(b"\n[rank%d]: x\n" % i)
    assert r.ranks == set(range(50)) and r._native is None
    big = b"\n" + b"[rank3]: step\n" * 8000 + b"[rank50]: x\n"
    r.region(big)
    assert 50 in r.ranks
    r.region(b"\n" + b"[rank7]: step\n" * 8000)
    assert (r._native is not None) == native_installed()


@pytest.mark.parametrize("native", ["1", "0"])
def test_rank_detector_sees_zero_padded_new_ranks(
    monkeypatch: pytest.MonkeyPatch, native: str
) -> None:
    """Once ranks 0..4 are seen, only a region that may hold a new rank is parsed; a
    zero-padded `[rank009]:` is rank 9, new (the detector once missed numbers of 3+ digits
    starting with 0)."""
    if native == "1" and not native_installed():
        pytest.skip("hyperscan is not installed (no wheel for this platform)")
    monkeypatch.setenv("RELAUNCH_NATIVE_SCAN", native)
    r = RankCollector()
    r.region(b"\n" + b"".join(b"[rank%d]: x\n" % i for i in range(5)))
    assert r.ranks == {0, 1, 2, 3, 4}
    r.region(b"\n[rank03]: x\n[rank4]: y\n")
    assert r.ranks == {0, 1, 2, 3, 4}
    r.region(b"\n[rank009]: x\n")
    assert r.ranks == {0, 1, 2, 3, 4, 9}
    r.region(b"\n   12: x\n")
    assert 12 in r.ranks


@needs_native
@pytest.mark.parametrize("seed", range(4))
def test_native_rank_detector_agrees_with_its_regex(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.setenv("RELAUNCH_NATIVE_SCAN", "1")
    rnd = random.Random(seed)
    r = RankCollector()
    r.region(b"\n" + b"".join(b"[rank%d]: x\n" % i for i in range(rnd.randrange(1, 300))))
    native = native_search(r._plain)  # what a large region would be searched with
    assert native is not None and r._detector is not None
    heads = [b"[rank%s]: ", b"[rank %s]: ", b"[default%s]: ", b"[1,%s]<stdout>: ", b"  %s: "]
    for _ in range(300):
        n = str(rnd.choice([0, 1, 9, 10, 99, 100, 299, 300, 1000, 10**6])).encode()
        n = rnd.choice([n, b"0" + n, b"00" + n])
        line = b"\n" + rnd.choice(heads) % n + b"x\n"
        assert native(line) == (r._detector.search(line) is not None), line


@needs_native
def test_threads_scan_at_once_with_their_own_scratch() -> None:
    """One compiled database serves every thread (the service analyses in several); each
    thread scans with its own scratch space, so concurrent scans give their own results."""
    from concurrent.futures import ThreadPoolExecutor

    scan = NativeScan(EVERY, ONCE, _hyperscan())
    texts = [_text(seed, 4000) for seed in range(8)]
    expected = [(sorted(h), p) for h, p in (StdlibScan(EVERY, ONCE).scan(t) for t in texts)]

    def one(i: int) -> tuple[list[tuple[int, int]], set[int]]:
        hits, present = scan.scan(texts[i % len(texts)])
        return sorted(hits), present

    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(one, range(64)))
    assert got == [expected[i % len(texts)] for i in range(64)]


def test_a_literal_inside_another_is_reported_by_both_backends() -> None:
    """A pattern file with triggers `CUDA error` and `CUDA error: out of memory`: one regex
    pass would report only the longer one at that position (found in review); the stdlib
    backend searches the shorter one on its own, so a row keyed on it is still tried."""
    every = (b"CUDA error", b"CUDA error: out of memory", b"CUDA")
    text = b"\nx CUDA error: out of memory\nCUDA error: misaligned\n"
    expected = _expected(text, every, ())
    assert (sorted(StdlibScan(every, ()).scan(text)[0]), set()) == expected
    if native_installed():
        assert (sorted(NativeScan(every, (), _hyperscan()).scan(text)[0]), set()) == expected
