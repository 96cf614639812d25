"""The evidence memos of restart_agent.lines return what they would compute.

`LineInterpreter._evidence` remembers what a traceback's frame texts say (texts, function
names, user frame: `frame_facts`) and which messages name no entity (by their digit mask:
`remembered_entity`). Tracebacks with the same frame texts at other log lines, of other
ranks, under other pattern rows (one validated as a config error, one not) and in a
second scan of the same process must each get their own line numbers, rank and
recoverability; different frame texts their own user frame; messages differing in their
digits their own entity. The whole scan equals the speed tests' slow reference (memos
off), and a memo that ignores its key is caught.
"""

from __future__ import annotations

import random
import re

import pytest

import relaunch.restart_agent as ra
import relaunch.restart_agent.lines as lines_mod
from relaunch.restart_agent import fingerprint as fp_mod
from relaunch.restart_agent.model import CycleEvidence, Evidence
from relaunch.restart_agent.outcomes import digit_blind
from tests.restart_agent.test_agent_speed import reference

CONFIG_FRAMES = [
    '  File "/work/train.py", line 10, in <module>',
    "    main()",
    '  File "/work/cfg.py", line 5, in validate_args',
    "    check(args)",
]
OTHER_FRAMES = [
    '  File "/work/train.py", line 10, in <module>',
    "    main()",
    '  File "/work/model.py", line 77, in forward',
    "    x = self.w[k]",
]


def _log(noise: int, seed: int) -> tuple[bytes, dict[int, list[int]]]:
    """Tracebacks of ranks 0..5 (same frame texts for 0..3), noise lines between them
    (so the same texts sit at other line numbers), then untracebacked messages; and the
    log line numbers of each rank's frame lines."""
    rnd = random.Random(seed)
    lines: list[str] = []
    where: dict[int, list[int]] = {}

    def block(rank: int, frames: list[str], error: str) -> None:
        for _ in range(rnd.randrange(noise + 1)):
            lines.append(f"[rank{rank}]: step {rnd.randrange(10**6)} loss 0.{rnd.randrange(99)}")
        lines.append(f"[rank{rank}]: Traceback (most recent call last):")
        where[rank] = []
        for f in frames:
            lines.append(f"[rank{rank}]: {f}")
            if 'File "' in f:
                where[rank].append(len(lines))
        lines.append(f"[rank{rank}]: {error}")

    block(0, CONFIG_FRAMES, "ValueError: bad option 12 in the batch")
    block(1, CONFIG_FRAMES, "KeyError: 'w'")  # same frames, a row not validated as config
    block(2, CONFIG_FRAMES, "ValueError: bad option 34 in the batch")
    block(3, CONFIG_FRAMES, "KeyError: 'v'")
    block(
        4, OTHER_FRAMES, "ValueError: bad option 56 in the batch"
    )  # other frames; no config words
    block(5, OTHER_FRAMES, "KeyError: 'w'")
    lines += [
        "[rank6]: ValueError: sample 12 of the shard is bad",  # entity: the data index
        "[rank7]: ValueError: sample 34 of the shard is bad",  # same digit mask
        "[rank8]: RuntimeError: worker 12 stopped",  # no entity
        "[rank9]: RuntimeError: worker 34 stopped",
        "[rank10]: FileNotFoundError: [Errno 2] No such file or directory: '/data/s12.bin'",
        "[rank11]: FileNotFoundError: [Errno 2] No such file or directory: '/data/s34.bin'",
    ]
    return ("\n".join(lines) + "\n").encode(), where


def _by_rank(ev: CycleEvidence) -> dict[int | None, Evidence]:
    return {e.rank: e for e in ev.roots}


def _check(ev: CycleEvidence, where: dict[int, list[int]]) -> None:
    roots = _by_rank(ev)
    for rank in range(6):
        e = roots[rank]
        frames = CONFIG_FRAMES if rank < 4 else OTHER_FRAMES
        texts = [f.strip() for f in frames if 'File "' in f]
        assert e.context == [
            {"line": n, "text": t} for n, t in zip(where[rank], texts, strict=True)
        ], rank
        user = "/work/cfg.py:5" if rank < 4 else "/work/model.py:77"
        assert e.user_frame == user and e.entity == user, rank
        config = rank in (0, 2)  # a ValueError raised in validate_args
        assert (e.recoverability == "config") is config, rank
    assert roots[6].entity == "sample 12" and roots[7].entity == "sample 34"
    assert roots[8].entity is None and roots[9].entity is None
    assert roots[10].entity == "/data/s12.bin" and roots[11].entity == "/data/s34.bin"


def test_same_frame_texts_keep_their_own_lines_ranks_and_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    computed: list[tuple[str | bytes, ...]] = []
    plain = lines_mod.frame_facts

    def spy(raws: tuple[str | bytes, ...]) -> lines_mod.FrameFacts:
        computed.append(raws)
        return plain(raws)

    monkeypatch.setattr(lines_mod, "frame_facts", spy)
    lines_mod._FACTS.clear()
    fresh = 0  # frame lists computed by the scans (the reference computes its own)
    for noise, seed in ((0, 1), (3, 2), (7, 3)):  # the memo stays warm across scans
        data, where = _log(noise, seed)
        ev = ra.LogScanner()
        before = len(computed)
        ev.feed(data)
        got = ev.finish()
        fresh += len(computed) - before
        _check(got, where)
        assert got == reference(data)
    # remembered: each of the 2 frame lists computed once (twice if kept once as str, by
    # the line-by-line path, once as bytes), not once per traceback (18)
    assert 2 <= fresh <= 4


def test_a_memo_ignoring_its_key_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks above can fail: frame facts or entities given for the wrong key."""
    data, where = _log(2, 4)
    first: list[lines_mod.FrameFacts] = []

    def stale_facts(raws: tuple[str | bytes, ...]) -> lines_mod.FrameFacts:
        if not first:
            first.append(lines_mod.frame_facts(raws))
        return first[0]

    monkeypatch.setattr(lines_mod, "_facts", stale_facts)
    s = ra.LogScanner()
    s.feed(data)
    with pytest.raises(AssertionError):
        _check(s.finish(), where)
    monkeypatch.setattr(lines_mod, "_facts", lines_mod.frame_facts)
    monkeypatch.setattr(lines_mod, "_entity", lambda body: None)
    s = ra.LogScanner()
    s.feed(data)
    with pytest.raises(AssertionError):
        _check(s.finish(), where)


def _entity_regexes() -> list[re.Pattern[str]]:
    """The module regexes entity_of reads (it calls no helper of its module that could
    read others)."""
    names = fp_mod.entity_of.__code__.co_names
    used = [getattr(fp_mod, n, None) for n in names]
    # its one helper, `_holds`, looks for literal words before a regex runs: digit-blind as
    # long as no word holds a digit
    helpers = [f for f in used if callable(f) and getattr(f, "__module__", "") == fp_mod.__name__]
    assert helpers == [fp_mod._holds]
    words = [w for n in names if n.endswith("_WORDS") for w in getattr(fp_mod, n)]
    assert words and not any(c.isdigit() for w in words for c in w)
    return [rx for rx in used if isinstance(rx, re.Pattern)]


def test_entity_regexes_are_digit_blind() -> None:
    """`remembered_entity` keys messages by their digit mask: it is exact only while every
    regex entity_of runs treats all ASCII digits alike."""
    found = _entity_regexes()
    assert len(found) >= 4
    assert all(digit_blind(rx) for rx in found), [rx.pattern for rx in found]


def test_remembered_entity_is_entity_of_and_a_part_of_the_message() -> None:
    """Fuzz: digits changed, the memo gives entity_of's answer; and that answer is a part of
    the message (so a message without "/" names no entity starting with "/", which
    `_evidence` relies on when a user frame is known)."""
    rnd = random.Random(11)
    messages = [
        "ValueError: sample 715438 of shard part-03630 has 5110 tokens > 8192",
        "RuntimeError: NCCL communicator was aborted on rank 1023.",
        "FileNotFoundError: [Errno 2] No such file: '/data/shard_0012.bin'",
        "RuntimeError: error loading /ckpt/iter_0001200/model_optim_rng.pt step 12",
        "OSError: checkpoint iter_0005 not found in ./runs/7/ckpt",
        "IndexError: index 42 is out of bounds for dimension 0 with size 8",
        "KeyError: 'layers.84.mlp.dense_h_to_4h.weight_6'",
        "ValueError: bad value at /a/b3/c4 and 'C:\\x\\y9'",
        "RuntimeError: batch=17 offset:9 position #3 idx 0",
    ]
    lines_mod._NO_ENTITY.clear()
    for _ in range(3000):
        base = rnd.choice(messages)
        msg = "".join(rnd.choice("0123456789") if c.isdigit() else c for c in base)
        want = fp_mod.entity_of(msg)
        assert lines_mod.remembered_entity(msg) == want, msg
        assert want is None or want in msg, msg


def test_frame_facts_memo_is_frame_facts() -> None:
    raws = (b'File "/w/a.py", line 3, in validate_args', 'File "/usr/lib/python3/x.py", line 1')
    lines_mod._FACTS.clear()
    assert lines_mod.remembered_frame_facts(raws) == lines_mod.frame_facts(raws)
    assert lines_mod.remembered_frame_facts(raws) == (
        ('File "/w/a.py", line 3, in validate_args', 'File "/usr/lib/python3/x.py", line 1'),
        ["validate_args", ""],
        "/w/a.py:3",
    )
    as_str = (raws[0].decode(), raws[1])  # the same texts as str: the same facts
    assert lines_mod.remembered_frame_facts(as_str) == lines_mod.frame_facts(raws)


def test_evidence_memos_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines_mod, "MAX_MEMO", 4)
    monkeypatch.setattr(lines_mod, "MAX_ENTITY_MEMO", 4)
    lines_mod._FACTS.clear()
    lines_mod._NO_ENTITY.clear()
    out = []
    for r in range(40):
        out += [
            f"[rank{r}]: Traceback (most recent call last):",
            f'[rank{r}]:   File "/work/m{r}.py", line {r + 1}, in f{r}',
            f"[rank{r}]: RuntimeError: stopped in phase a/{'x' * r}",  # "/": entity_of runs
        ]
    data = ("\n".join(out) + "\n").encode()
    s = ra.LogScanner()
    s.feed(data)
    ev = s.finish()
    assert 0 < len(lines_mod._FACTS) <= 4 and 0 < len(lines_mod._NO_ENTITY) <= 4
    assert [e.user_frame for e in ev.roots] == [f"/work/m{r}.py:{r + 1}" for r in range(40)]
    assert ev == reference(data)


def test_a_remembered_head_split_yields_to_a_generic_lead_behind_the_head() -> None:
    # two lines with the same head up to their one trigger (`Segmentation`): the first has no
    # line behind a lead, the second has torch's `[rank3]:` behind one, past the head; the
    # remembered split of the first must not be reused for the second (non-ASCII: line())
    data = (
        "worker-1: Segmentation fault \u00e9\n"
        "worker-1: Segmentation fault >> [rank3]: Segmentation fault (core dumped) \u00e9\n"
    ).encode()
    s = ra.LogScanner()
    s.feed(data)
    ev = s.finish()
    assert [(e.failure_class, e.rank) for e in ev.roots] == [("segfault", None), ("segfault", 3)]
    assert ev == reference(data)
