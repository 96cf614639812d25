"""Runs `relaunch analyze` for many cycles in one interpreter (the real-corpus test's driver).

Each item is the argv of one `relaunch analyze` call; it goes through the CLI's own `main`
(argument parsing, history database, JSON printing) exactly as the console script does, only
without a fresh interpreter per call. Items run in order, so cycle 0 of a job is stored
before its cycle 1 is analysed.

    python tests/_real_corpus_driver.py < argvs.json   # -> JSON list of {rc, stdout, stderr}
    python tests/_real_corpus_driver.py --report       # table and counts, every corpus
    python tests/_real_corpus_driver.py --report holdout   # one corpus (real | holdout | ... | holdout6 | train2)

Run it by path (not `-m`) so that `relaunch_cli` comes from PYTHONPATH, not the cwd.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
# Corpus name -> directory holding `labels.yaml` and one `<id>.log` per case. `real` is the
# training corpus the analyzer was tuned on (`train2` is a second one, for issue 24's general
# rules); `holdout` to `holdout10b` were each collected
# and labelled without the analyzer's authors seeing them, to measure whether the analyzer generalises.
CORPORA = {
    "real": FIXTURES / "real",
    "holdout": FIXTURES / "real_holdout",
    "holdout2": FIXTURES / "real_holdout2",
    "holdout3": FIXTURES / "real_holdout3",
    "holdout4": FIXTURES / "real_holdout4",
    "holdout5": FIXTURES / "real_holdout5",
    "holdout6": FIXTURES / "real_holdout6",
    "holdout7": FIXTURES / "real_holdout7",
    "holdout8a": FIXTURES / "real_holdout8a",
    "holdout8b": FIXTURES / "real_holdout8b",
    "holdout9a": FIXTURES / "real_holdout9a",
    "holdout9b": FIXTURES / "real_holdout9b",
    "holdout10a": FIXTURES / "real_holdout10a",
    "holdout10b": FIXTURES / "real_holdout10b",
    # A second training corpus (issue 24): collected to tune GENERAL rules on, not blind.
    "train2": FIXTURES / "real_train2",
}


def load_cases(corpus: str) -> list[dict[str, Any]]:
    import yaml

    labels = CORPORA[corpus] / "labels.yaml"
    return yaml.safe_load(labels.read_text(encoding="utf-8"))["cases"]


def job_id(corpus: str, case: dict[str, Any]) -> str:
    """Unique across corpora: the corpus name prefixes the case id."""
    return f"{corpus}_{case['id']}"


def run_one(argv: list[str]) -> dict[str, Any]:
    from relaunch.cli.main import main  # resolved through PYTHONPATH: the code under test

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse usage errors exit
            rc = exc.code if isinstance(exc.code, int) else 2
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


def case_argvs(case: dict[str, Any], db_dir: Path, job: str | None = None) -> list[list[str]]:
    """Cycle 0 and an identical cycle 1 of one case, in a database of its own.

    `job` (default: the case id) names both the job and its database file; callers running
    several corpora pass `job_id(corpus, case)` so ids never collide.
    """
    job = job or case["id"]
    db = f"sqlite:///{db_dir / (job + '.db')}"
    log = str(REPO_ROOT / case["file"])
    base = ["analyze", log, "--db", db, "--job-id", job, "--format", "json"]
    return [[*base, "--cycle", "0"], [*base, "--cycle", "1"]]


def report(corpora: list[str]) -> int:
    for corpus in corpora:
        print(f"== corpus {corpus} ({CORPORA[corpus].relative_to(REPO_ROOT)})")
        report_corpus(corpus)
        print()
    return 0


def report_corpus(corpus: str) -> None:
    cases = load_cases(corpus)
    first_ok = again_ok = rank_ok = rank_total = 0
    infra = false_stops = 0  # infrastructure cases / those STOPped (not by the scheduler)
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            argvs = case_argvs(case, Path(tmp), job_id(corpus, case))
            v0, v1 = (json.loads(run_one(a)["stdout"]) for a in argvs)
            ok0 = v0["decision"] == case["expected_first"]
            ok1 = v1["decision"] == case["expected_recurrence"]
            p0 = v0.get("primary") or {}
            rank = p0.get("rank")
            if case["domain"] == "infrastructure":
                infra += 1
                false_stops += any(
                    v["decision"] == "STOP" and v["rule"] != "stop.scheduler_terminated"
                    for v in (v0, v1)
                )
            first_ok += ok0
            again_ok += ok1
            if case["rank"] is not None:
                rank_total += 1
                rank_ok += rank == case["rank"]
            mark = "ok " if ok0 and ok1 and (case["rank"] in (None, rank)) else "BAD"
            print(
                f"{mark} {case['id']:<44} {case['domain'][:5]} "
                f"want {case['expected_first'][0]}/{case['expected_recurrence'][0]} "
                f"got {v0['decision'][0]}/{v1['decision'][0]} "
                f"rank want {case['rank']} got {rank} | c0 {v0['rule']} c1 {v1['rule']} "
                f"class={p0.get('failure_class')} src={(v0.get('fan_out') or {}).get('primary_reason')}"
            )
    n = len(cases)
    print(
        f"\n{corpus}: cases {n}: first sight right {first_ok}/{n}, "
        f"recurrence right {again_ok}/{n}, rank named right {rank_ok}/{rank_total}, "
        f"false STOP {false_stops} of {infra} infrastructure"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--report"]:
        chosen = sys.argv[2:] or list(CORPORA)
        unknown = [c for c in chosen if c not in CORPORA]
        if unknown:
            print(f"unknown corpus {unknown[0]!r}; known: {', '.join(CORPORA)}", file=sys.stderr)
            sys.exit(2)
        sys.exit(report(chosen))
    argvs = json.load(sys.stdin)
    json.dump([run_one(a) for a in argvs], sys.stdout)
