"""Real failure excerpts from public issue threads through `relaunch analyze`, two cycles each.

Several corpora, each a directory with `labels.yaml` (see tests/_real_corpus_driver.py CORPORA):
`real` (tests/fixtures/real/, the training corpus the analyzer was tuned on), `holdout`
(tests/fixtures/real_holdout/), `holdout2` (tests/fixtures/real_holdout2/), `holdout3`
(tests/fixtures/real_holdout3/) and `holdout4` (tests/fixtures/real_holdout4/), other threads, each
collected and labelled without the analyzer's authors seeing them, to measure generalisation,
`holdout5` to `holdout7`, `holdout8a`/`holdout8b` and `holdout9a`/`holdout9b`, `holdout10a`/`holdout10b` (each pair one
blind collection, two collectors on odd and even threads), and `train2`
(tests/fixtures/real_train2/), a second training corpus for issue 24's general rules.
No thread is in two corpora. Test ids are `<corpus>/<case id>`.

Every case is analysed as cycle 0 of a fresh job, then the
same log again as cycle 1 (an identical cycle, still no progress), through `relaunch analyze`
against a real SQLite history file (all cases in one driver subprocess, see
tests/_real_corpus_driver.py; a test checks fresh CLI processes decide the same). The decision on each cycle must equal the label; the
primary failure's rank must equal the label's rank when the label names one. Labels were
written from reading each log before the analyzer ever ran on it (see the README there).

A case the current code gets wrong carries `xfail: "<why>"` in labels.yaml and runs as a
strict xfail: once the code gets it right the test fails (XPASS) until the mark is removed.

The CLI subprocess inherits PYTHONPATH when it is set (so another worktree's code can be run
against these fixtures); otherwise it runs this repository's code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests._real_corpus_driver import CORPORA, case_argvs, job_id, load_cases

REPO_ROOT = Path(__file__).resolve().parents[2]
DRIVER = REPO_ROOT / "tests" / "_real_corpus_driver.py"

FIELDS = {
    "id",
    "file",
    "source",
    "project",
    "domain",
    "expected_first",
    "expected_recurrence",
    "rank",
    "why",
}
OPTIONAL = {"xfail", "blind_expected_first", "blind_expected_recurrence", "relabelled"}
DECISIONS = {"STOP", "RESTART"}
DOMAINS = {"workload", "infrastructure"}
ID_RE = re.compile(r"^[a-z0-9_]+$")


# (corpus, case) for every case of every corpus, in order.
CASES = [(corpus, case) for corpus in CORPORA for case in load_cases(corpus)]


def case_key(corpus: str, case: dict) -> str:
    return f"{corpus}/{case['id']}"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO_ROOT)}


def analyze_subprocess(argv: list[str], cwd: Path) -> dict:
    """One `relaunch analyze` run in its own interpreter, as a user types it."""
    proc = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", *argv],
        cwd=cwd,  # not the repository: `relaunch_cli` must come from PYTHONPATH
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, dict]]:
    """Both cycles of every case, through `relaunch analyze`'s main in one driver process.

    140 fresh interpreters take minutes on a loaded machine; the driver runs the same CLI
    entry point (parsing, SQLite history, JSON output) for all of them in order.
    """
    tmp = tmp_path_factory.mktemp("real_corpus")
    argvs = [a for corpus, case in CASES for a in case_argvs(case, tmp, job_id(corpus, case))]
    proc = subprocess.run(
        [sys.executable, str(DRIVER)],
        cwd=tmp,
        env=_env(),
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert len(results) == len(argvs)
    out: dict[str, tuple[dict, dict]] = {}
    for i, (corpus, case) in enumerate(CASES):
        r0, r1 = results[2 * i], results[2 * i + 1]
        key = case_key(corpus, case)
        assert r0["rc"] == 0 and r1["rc"] == 0, (key, r0["stderr"], r1["stderr"])
        out[key] = (json.loads(r0["stdout"]), json.loads(r1["stdout"]))
    return out


def _param(corpus: str, case: dict) -> object:
    marks = []
    if case.get("xfail"):
        marks.append(pytest.mark.xfail(reason=case["xfail"], strict=True))
    return pytest.param(corpus, case, id=case_key(corpus, case), marks=marks)


def describe(v: dict) -> str:
    p = v.get("primary") or {}
    return (
        f"{v['decision']} rule={v['rule']} class={p.get('failure_class')} "
        f"rank={p.get('rank')} line={p.get('line')!r}"
    )


@pytest.mark.parametrize(("corpus", "case"), [_param(*c) for c in CASES])
def test_real_case_two_cycles(
    corpus: str, case: dict, verdicts: dict[str, tuple[dict, dict]]
) -> None:
    first, again = verdicts[case_key(corpus, case)]
    got = (first["decision"], again["decision"])
    want = (case["expected_first"], case["expected_recurrence"])
    assert got == want, f"cycle 0: {describe(first)}; cycle 1: {describe(again)}"
    if case["rank"] is not None:
        ranks = ((first.get("primary") or {}).get("rank"), (again.get("primary") or {}).get("rank"))
        assert ranks == (case["rank"], case["rank"]), f"primary ranks {ranks}, label {case['rank']}"


def test_driver_gives_what_separate_cli_processes_give(
    tmp_path: Path, verdicts: dict[str, tuple[dict, dict]]
) -> None:
    """The driver is only a speed-up: fresh `relaunch analyze` processes decide the same."""
    for corpus, case in (CASES[0], CASES[len(CASES) // 2], CASES[-1]):
        argvs = case_argvs(case, tmp_path, job_id(corpus, case))
        got = tuple(analyze_subprocess(a, tmp_path) for a in argvs)
        key = case_key(corpus, case)
        for fresh, driven in zip(got, verdicts[key], strict=True):
            assert fresh["decision"] == driven["decision"], key
            assert fresh["rule"] == driven["rule"], key
            assert fresh["primary"] == driven["primary"], key


@pytest.mark.parametrize("corpus", list(CORPORA))
def test_labels_are_complete_and_valid(corpus: str) -> None:
    corpus_dir = CORPORA[corpus]
    cases = yaml.safe_load((corpus_dir / "labels.yaml").read_text(encoding="utf-8"))["cases"]
    assert cases, f"{corpus}: no cases"
    ids = [c.get("id") for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    listed = set()
    for case in cases:
        keys = set(case)
        assert keys >= FIELDS, f"{case.get('id')}: missing {sorted(FIELDS - keys)}"
        assert keys <= FIELDS | OPTIONAL, (
            f"{case['id']}: unknown {sorted(keys - FIELDS - OPTIONAL)}"
        )
        assert ID_RE.match(case["id"]), case["id"]
        expected_file = f"{corpus_dir.relative_to(REPO_ROOT).as_posix()}/{case['id']}.log"
        assert case["file"] == expected_file, case["id"]
        path = REPO_ROOT / case["file"]
        assert path.is_file() and path.stat().st_size > 0, f"{case['id']}: no log at {path}"
        assert case["source"].startswith("https://"), case["id"]
        assert case["domain"] in DOMAINS, case["id"]
        assert case["expected_first"] in DECISIONS, case["id"]
        assert case["expected_recurrence"] in DECISIONS, case["id"]
        rank = case["rank"]
        assert rank is None or (isinstance(rank, int) and rank >= 0), case["id"]
        assert isinstance(case["why"], str) and case["why"].strip(), case["id"]
        assert isinstance(case["project"], str) and case["project"].strip(), case["id"]
        if "xfail" in case:
            assert isinstance(case["xfail"], str) and case["xfail"].strip(), case["id"]
        listed.add(path.name)
    on_disk = {p.name for p in corpus_dir.glob("*.log")}
    assert on_disk == listed, f"logs without a label: {sorted(on_disk - listed)}"


def test_no_thread_in_two_corpora() -> None:
    """A held-out corpus measures generalisation only if none of its threads is in another corpus
    (the training corpus or an earlier held-out one). One corpus may hold two excerpts of a thread."""
    assert {
        "real",
        "holdout",
        "holdout2",
        "holdout3",
        "holdout4",
        "holdout5",
        "holdout6",
        "train2",
    } <= set(CORPORA), sorted(CORPORA)
    owner: dict[str, str] = {}  # thread URL -> the first corpus/case that uses it
    for corpus in CORPORA:
        for case in load_cases(corpus):
            src = case["source"].rstrip("/")
            first = owner.setdefault(src, f"{corpus}/{case['id']}")
            assert first.split("/")[0] == corpus, (
                f"thread {src} is in two corpora: {first} and {corpus}/{case['id']}"
            )


def test_no_false_stop_on_any_infrastructure_case(verdicts: dict[str, tuple[dict, dict]]) -> None:
    """Issue 24: false STOP is the number that must be zero. Every infrastructure case of every
    corpus (training and held-out), as cycle 0 and as an identical cycle 1, never STOPs; the
    only infrastructure STOP is the scheduler ending the allocation (time limit), which no
    restart inside it can help. No xfail applies here: one false STOP fails the test."""
    wrong = []
    for corpus, case in CASES:
        if case["domain"] != "infrastructure":
            continue
        key = case_key(corpus, case)
        for cycle, v in enumerate(verdicts[key]):
            if v["decision"] == "STOP" and v["rule"] != "stop.scheduler_terminated":
                wrong.append(f"{key} cycle {cycle}: {describe(v)}")
    assert not wrong, "false STOP on infrastructure:\n" + "\n".join(wrong)
    assert sum(c["domain"] == "infrastructure" for _, c in CASES) >= 100
