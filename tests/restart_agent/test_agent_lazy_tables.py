"""What the analyzer derives lazily at start-up gives the results the eager form gave.

- The built-in pattern table's regexes are compiled on first use (`PatternRow.regex`), each
  to the regex its source gives; a row of an extra table is compiled, and rejected, at load.
- The line gate derives a row's needles when a line first reaches the row; its answers are
  those of the eager rule (a line passes when some row has a trigger, a require and a needle
  in it) on every example of every row, on lines one edit away from them and on noise; the
  gate and the row selector find the same rows with the native literal pass and without.
- Dialect rows are compiled over bytes only; every bad dialect gets the error it always got.
- `fingerprint` digests with the built-in SHA-1: the same digest as `hashlib.sha1`.
- `entity_of` looks for each regex's literals before running it: the same entity as the
  regex-only form, on hand-made lines (mixed case, Unicode case folds, over-long) and
  random insertions into them.
- The tables' YAML is built directly from the parsed nodes when plain: the same data, types
  and errors as PyYAML's safe loader on the three tables and on aliases, recursion, merge
  keys, typed scalars, tagged collections, odd keys and broken documents.
"""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path

import pytest

from relaunch.restart_agent import fingerprint as _fp
from relaunch.restart_agent.linegate import _END, _SPACE, _ZEROS, LineGate
from relaunch.restart_agent.lines import READS
from relaunch.restart_agent.registry import (
    PATTERNS_FILE,
    PatternRow,
    RegistryError,
    build_registry,
    default_registry,
    regex_needles,
)
from relaunch.restart_agent.rowcache import RowSelector
from tests._agent_helpers import native_installed


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_built_in_rows_compile_on_first_use_to_their_source() -> None:
    reg = build_registry()
    assert not any("regex" in row.__dict__ for row in reg.patterns)  # nothing compiled yet
    for row in reg.patterns:
        assert row.regex is row.regex  # compiled once
        assert (row.regex.pattern, row.regex.flags) == (row.pattern, re.compile(row.pattern).flags)
        assert row.source == str(PATTERNS_FILE)


def test_a_broken_built_in_row_names_file_and_row_when_used() -> None:
    row = PatternRow(
        id="x.bad",
        pattern="(unclosed",
        failure_class="x",
        domain="workload",
        role="root",
        recoverability="stop",
        triggers=("rror",),
        source=str(PATTERNS_FILE),
    )
    with pytest.raises(RegistryError, match=r"patterns\.yaml: row 'x\.bad': bad regex"):
        _ = row.regex


def test_extra_rows_are_compiled_at_load(tmp_path: Path) -> None:
    good = _write(
        tmp_path,
        "site.yaml",
        "patterns:\n  - id: site.x\n    regex: 'boom (?P<msg>.*)'\n    failure_class: x\n"
        "    domain: workload\n    role: root\n    triggers: ['boom']\n",
    )
    row = build_registry([good]).patterns[0]
    assert row.id == "site.x" and "regex" in row.__dict__
    # a row with a bad regex and a bad domain: the regex is reported, as before
    bad = _write(
        tmp_path,
        "bad.yaml",
        "patterns:\n  - id: site.bad\n    regex: '(unclosed'\n    failure_class: x\n"
        "    domain: cosmic\n    role: root\n    triggers: ['rror']\n",
    )
    with pytest.raises(RegistryError, match="bad regex"):
        build_registry([bad])


def _eager_skip(lines: list[bytes]) -> list[bool]:
    """The gate's rule with every row's needles derived up front (its former form)."""

    def masked(lits: tuple[str, ...] | frozenset[str] | None) -> tuple[bytes, ...] | None:
        return tuple(t.encode().translate(_ZEROS) for t in lits) if lits else None

    reg = default_registry()
    rows = [
        (masked(r.triggers), masked(r.requires), masked(regex_needles(r.regex)))
        for r in reg.patterns
    ]
    reads = tuple(c.encode().translate(_ZEROS) for c in READS)
    out = []
    for raw in lines:
        key = raw.translate(_ZEROS)
        if b"\x00" in key or b"\r" in key.rstrip(b"\r\n") or not key.isascii():
            out.append(False)
            continue
        key = key.rstrip(_SPACE) + _END
        if any(c in key for c in reads):
            out.append(False)
            continue
        hit = any(all(s is None or any(t in key for t in s) for s in sets) for sets in rows)
        out.append(not hit)
    return out


def _lines() -> list[bytes]:
    rng = random.Random(18)
    base = [
        ex.encode("ascii", "ignore") for row in default_registry().patterns for ex in row.examples
    ]
    base += [
        b"[rank3]: UserWarning: this is error-prone",
        b"[rank3]: errors='ignore'",
        b"iteration 100 | loss 2.3",
        b"[rank7]: RuntimeError",
        b"",
    ]
    out = []
    for line in base:
        out.append(b"[rank%d]: " % rng.randrange(1024) + line)
        out.append(line)
        for _ in range(3):  # one edit: a byte dropped, doubled or replaced
            if not line:
                break
            i = rng.randrange(len(line))
            out.append(
                rng.choice(
                    [
                        line[:i] + line[i + 1 :],
                        line[: i + 1] + line[i:],
                        line[:i] + bytes([rng.randrange(32, 127)]) + line[i + 1 :],
                    ]
                )
            )
    return out


def test_lazy_gate_answers_as_the_eager_rule() -> None:
    lines = _lines()
    gate = LineGate(default_registry(), READS)
    assert [gate.skip(raw) for raw in lines] == _eager_skip(lines)
    assert [gate.skip(raw) for raw in lines] == _eager_skip(lines)  # cached answers


@pytest.mark.parametrize("native", ["1", "0"])
def test_gate_and_row_selector_answer_alike_on_either_backend(
    native: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The native pass (Hyperscan, where installed) and the stdlib tests find the same
    rows: the gate answers as the eager rule, the selector as the row-by-row rule, with
    and without hints."""
    if native == "1" and not native_installed():
        pytest.skip("hyperscan is not installed: only the stdlib backend exists here")
    monkeypatch.setenv("RELAUNCH_NATIVE_SCAN", native)
    reg = default_registry()
    gate, selector = LineGate(reg, READS), RowSelector(reg)
    assert (gate._native is not None) == (native == "1")
    assert (selector._native is not None) == (native == "1")
    lines = _lines()
    assert [gate.skip(raw) for raw in lines] == _eager_skip(lines)
    minimal = reg.prefilter
    for raw in lines:
        body = raw.decode("ascii", "replace")
        for hints in (None, frozenset(k for k in minimal if k in body), frozenset({"rror"})):
            want = [
                row
                for row in reg.patterns
                if any(
                    t in body and (hints is None or next(k for k in minimal if k in t) in hints)
                    for t in row.triggers
                )
                and (not row.requires or any(r in body for r in row.requires))
            ]
            assert selector._select(body, hints) == want, (body, hints)


def test_gate_derives_needles_only_for_rows_a_line_reaches() -> None:
    gate = LineGate(default_registry(), READS)
    assert gate.skip(b"[rank1]: nothing of interest here")
    assert not any(isinstance(n, tuple) or n is None for n in gate._needles)
    assert not gate.skip(b"[rank1]: torch.OutOfMemoryError: CUDA out of memory.")
    derived = sum(1 for n in gate._needles if isinstance(n, tuple) or n is None)
    assert 0 < derived < len(gate._needles)


_GOOD = "dialects:\n  - id: x\n    kind: iteration\n    regex: '{}'\n"


@pytest.mark.parametrize(
    ("regex", "message"),
    [
        ("(?L)it (?P<it>\\d+)", "bad regex"),  # locale flag: bytes accept it, text does not
        ("(unclosed", "bad regex"),
        ("it (?P<n>\\d+)", "needs a named group"),
        ("\\u0069t (?P<n>\\d+)", "needs a named group"),  # text-only escape, no group
        ("\\u0069t (?P<it>\\d+)", "must be ASCII"),
        ("\u00e9t (?P<it>\\d+)", "must be ASCII"),
    ],
)
def test_bad_dialects_get_the_errors_they_got(tmp_path: Path, regex: str, message: str) -> None:
    f = _write(tmp_path, "d.yaml", _GOOD.format(regex.replace("'", "''")))
    with pytest.raises(RegistryError, match=message):
        build_registry(dialect_files=[f])


def test_dialect_text_regex_is_the_bytes_one() -> None:
    for d in default_registry().dialects:
        assert d.regex.pattern.encode("ascii") == d.bregex.pattern
        assert d.regex.groupindex == d.bregex.groupindex


@pytest.mark.parametrize(
    "message",
    ["CUDA error: an illegal memory access", "", "naïve ünïcode 0x7f3a", "x" * 5000],
)
def test_fingerprint_digest_is_hashlib_sha1(message: str) -> None:
    want = hashlib.sha1(_fp.normalize(message).encode("utf-8", "replace")).hexdigest()[:12]
    assert _fp.fingerprint("cls", message) == f"cls:{want}"


_QUOTED = re.compile(r"""['"]((?:/|\.{1,2}/|[A-Za-z]:\\)[^'"]+)['"]""")


def _entity_reference(text: str, hint: str | None = None) -> str | None:
    """`entity_of` as it was: every regex tried on every line, no literal looked for first."""
    if hint:
        return hint.strip()[:300] or None
    text = text[: _fp.MAX_INPUT]
    m = _QUOTED.search(text)
    if m:
        return m.group(1)[:300]
    m = _fp._CHECKPOINT.search(text)
    if m:
        left = max((e.end() for e in _fp._TOKEN_EDGE.finditer(text, 0, m.start())), default=0)
        right = _fp._TOKEN_EDGE.search(text, m.end())
        token = text[left : right.start() if right else len(text)]
        if "/" in token:
            return token.strip("'\",.:;()[]")[:300]
    m = _fp._BARE_PATH.search(text)
    if m and m.group(1).count("/") >= 2:
        return m.group(1).rstrip(".,;:")[:300]
    m = _fp._DATA_INDEX.search(text)
    if m:
        return m.group(0)[:100]
    return None


ENTITY_TEXTS = [
    "ValueError: sample 981354 of shard part-02410 has 354 tokens > 8192",
    "RuntimeError: [Rank 884] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)",
    "FileNotFoundError: [Errno 2] No such file or directory: '/data/train.bin'",
    "saving CKPT to /ckpt/iter_0001000/model.pt failed",
    "Loading Checkpoint global_step100/zero_pp_rank_0 failed",
    "IndexError: INDEX 17 is out of bounds",
    "error at Step: 42 of BATCH=7",
    "broken at ite\u212a 5",  # Kelvin sign: matches 'k' case-insensitively
    "\u017ftep 3 failed",  # long s: matches 's' case-insensitively
    "POSITION # 9 in /a/b/c.txt",
    "no entity here at all",
    "x" * 4100 + " step 5",  # beyond MAX_INPUT
    "offset=12 '/x/y' iter_12",
    "\u00e9chec: index 4",
]


def test_entity_of_is_the_regex_only_form() -> None:
    rng = random.Random(7)
    texts = list(ENTITY_TEXTS)
    words = ["step", "Idx", "ckpt", "/p/q", "'", '"', "iter_", "\u212a", "\u0130", ": ", "=", "9"]
    for base in ENTITY_TEXTS:
        for _ in range(20):
            i = rng.randrange(len(base) + 1)
            texts.append(base[:i] + rng.choice(words) + base[i:])
    for t in texts:
        assert _fp.entity_of(t) == _entity_reference(t), t
        assert _fp.entity_of(t, "hint ") == _entity_reference(t, "hint ")


def _same(a: object, b: object) -> bool:
    """Equal, with the same types all the way down (1 == True == 1.0 is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b or (a != a and b != b)  # NaN


YAML_DOCS = [
    "",
    "# only a comment\n",
    "a: 1\nb: true\nc: null\nd: 1.5\ne: .nan\nf: 2001-12-14\ng: 0x1f\nh: '1'\ni: ~\n",
    "a: [1, two, {x: y}]\nb:\n  - !!str 3\n  - !!int '4'\n",
    "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n",
    "a: &x [1, 2]\nb: *x\n",
    "a: &r [1, *r]\n",
    "1: one\nnull: none\n? [k]\n: v\n",
    "a: 1\na: 2\nb: 3\n",
    "s: !!set {x, y}\no: !!omap [{a: 1}, {b: 2}]\nbin: !!binary aGVsbG8=\n",
    "= : v\n",
    "- just\n- a\n- list\n",
    "plain scalar\n",
    "x: !!python/name:os.system ''\n",
    "a: [unclosed\n",
    "--- a\n--- b\n",
]


@pytest.mark.parametrize("text", YAML_DOCS)
def test_yaml_fast_path_is_the_safe_loader(text: str) -> None:
    import yaml

    from relaunch.restart_agent.registry import _LOADER, load_yaml_text

    try:
        want = yaml.load(text, Loader=_LOADER)  # a safe loader
    except yaml.YAMLError as exc:
        with pytest.raises(type(exc)) as got:
            load_yaml_text(text)
        assert str(got.value) == str(exc)
        return
    got_data = load_yaml_text(text)
    if "&r" in text:  # a list holding itself, as the safe loader builds it
        assert got_data["a"][1] is got_data["a"] and repr(got_data) == repr(want)
    elif "&x" in text:  # an alias: one object, as the safe loader shares it
        assert got_data["b"] is got_data["a"] and _same(got_data, want)
    elif isinstance(want, dict) and "s" in want:  # a set: no order to compare
        assert got_data == want
    else:
        assert _same(got_data, want), (got_data, want)


@pytest.mark.parametrize("name", ["patterns.yaml", "progress.yaml", "taxonomy.yaml"])
def test_yaml_fast_path_reads_the_tables_as_the_safe_loader(name: str) -> None:
    import yaml

    from relaunch.restart_agent.registry import _LOADER, HERE, load_yaml_text

    text = (HERE / name).read_text(encoding="utf-8")
    assert _same(load_yaml_text(text), yaml.load(text, Loader=_LOADER))
