"""Straggler detection end to end: real 3-rank gloo jobs under `relaunch run`.

One rank sleeps 5x longer in its timed section `fwd`: the launcher names it, and only it,
within two reports. Without a slow rank, 20 reports name nobody. The jobs run until every
rank has sent a given number of reports (tests/workers/straggler_job.py), so the tests count
reports, never seconds. Bad option values are one-line errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

from tests._launcher_helpers import REPO, read_log, run_relaunch, run_two_nodes

WORKER = REPO / "tests" / "workers" / "straggler_job.py"
FACT = "[relaunch] fact: "


def _args(tmp_path: Path, job: str, *extra: str) -> list[str]:
    return [
        "--nproc-per-node",
        "3",
        "--log-dir",
        str(tmp_path / "logs"),
        "--job-id",
        job,
        "--ft-gpu-health",
        "off",
        "--ft-attribution-endpoint",
        "off",
        *extra,
    ]


def _facts(text: str, kind: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if line.startswith(FACT):
            obj = json.loads(line[len(FACT) :])
            if obj["fact"] == kind:
                out.append(obj)
    return out


def test_a_rank_five_times_slower_is_named_within_two_reports(tmp_path: Path) -> None:
    args = _args(tmp_path, "slow", "--ft-straggler-report-interval", "0.6")
    worker = [str(WORKER), "--reports", "4", "--base", "0.05", "--slow-rank", "1"]
    r = run_relaunch(tmp_path, args + worker, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    log = read_log(tmp_path, "slow", 0)
    named = _facts(log, "straggler")
    assert named, log[-3000:]
    assert {f["rank"] for f in named} == {1}  # only the slow rank
    first = named[0]
    assert first["reports"] == 2 and first["report"] <= 2  # within two reports
    assert first["section"] == "fwd" and first["threshold"] == 0.7 and first["cycle"] == 0
    assert first["relative"] < 0.5  # 5x slower against the median rank
    [scores] = _facts(log, "straggler_scores")
    assert scores["reports"] >= 4
    assert set(scores["ranks"]) == {"0", "1", "2"}
    assert scores["ranks"]["1"]["below"] == scores["reports"]
    assert scores["ranks"]["0"]["below"] == 0 and scores["ranks"]["2"]["below"] == 0
    # the facts are launcher lines: never rank-prefixed
    assert all(line.startswith("[relaunch] ") for line in log.splitlines() if '"straggler' in line)


def test_no_straggler_is_named_across_twenty_reports_of_alike_ranks(tmp_path: Path) -> None:
    args = _args(tmp_path, "calm", "--ft-straggler-report-interval", "0.5")
    worker = [str(WORKER), "--reports", "20", "--base", "0.05"]
    r = run_relaunch(tmp_path, args + worker, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    log = read_log(tmp_path, "calm", 0)
    assert _facts(log, "straggler") == []
    [scores] = _facts(log, "straggler_scores")
    assert scores["reports"] >= 20
    assert all(v["below"] < 2 for v in scores["ranks"].values())


def test_interval_zero_turns_straggler_detection_off(tmp_path: Path) -> None:
    args = _args(tmp_path, "off", "--ft-straggler-report-interval", "0")
    worker = [str(WORKER), "--reports", "0", "--slow-rank", "1"]
    r = run_relaunch(tmp_path, args + worker, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    log = read_log(tmp_path, "off", 0)
    assert '"straggler' not in log
    assert "sent 0 straggler reports" in log


def test_bad_straggler_options_are_one_line_errors(tmp_path: Path) -> None:
    cases = [
        (["--ft-straggler-threshold", "0"], "0 < T <= 1"),
        (["--ft-straggler-threshold", "1.5"], "0 < T <= 1"),
        (["--ft-straggler-threshold", "x"], "could not convert"),
        (["--ft-straggler-report-interval", "-1"], ">= 0"),
        (["--ft-straggler-report-interval", "nan"], ">= 0"),
    ]
    for extra, said in cases:
        r = run_relaunch(tmp_path, _args(tmp_path, "bad", *extra) + [str(WORKER)], timeout=60)
        assert r.returncode == 2, (extra, r.stderr)
        assert said in r.stderr and extra[0] in r.stderr, (extra, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "logs" / "bad").exists() or not list(
            (tmp_path / "logs" / "bad").glob("cycle_*.log")
        )


def test_a_straggler_that_becomes_a_hang_is_the_stored_verdicts_suspect(tmp_path: Path) -> None:
    """Launcher facts -> embedded restart agent -> SQLite history, all real: the slow rank
    is named, then hangs; the others wait for it in the all_reduce. The hang ends the cycle
    and the verdict blames the straggler (rank_source straggler), with its scores stored."""
    from relaunch import storage

    args = _args(
        tmp_path,
        "hang",
        "--ft-straggler-report-interval",
        "0.6",
        "--ft-heartbeat-timeout",
        "4",
        "--max-restarts",
        "0",
    )
    args[args.index("--ft-attribution-endpoint") + 1] = "embedded"
    db = tmp_path / "home" / "relaunch.db"
    args += ["--ft-db-url", f"sqlite:///{db}"]
    worker = [str(WORKER), "--reports", "100", "--slow-rank", "2", "--hang-after", "3"]
    r = run_relaunch(tmp_path, args + worker, timeout=300)
    assert r.returncode in (1, 3), r.stderr[-3000:]
    log = read_log(tmp_path, "hang", 0)
    assert "hang detected" in log
    assert {f["rank"] for f in _facts(log, "straggler")} == {2}
    repo = storage.open_repository(f"sqlite:///{db}")
    try:
        rec = repo.get_cycle("hang", 0)
        assert rec is not None and rec.verdict is not None, r.stderr[-3000:]
        primary = rec.verdict["primary"]
        assert primary["failure_class"] == "hang_detected"
        assert (primary["rank"], primary["rank_source"]) == (2, "straggler")
        [(cycle, kept)] = repo.stragglers("hang")
        assert cycle == 0 and kept["suspect_rank"] == 2 and kept["persistent"] == [2]
        assert rec.verdict["decision"] == "RESTART"  # blame only: the decision is the policy's
    finally:
        repo.close()


def test_two_nodes_compare_their_ranks_through_the_rendezvous_store(tmp_path: Path) -> None:
    """Two launchers on this machine, one rank each: a node alone has nothing to compare, so
    naming the slow rank needs the other node's reports (through the c10d store). Only the
    slow rank's own node names it, in its own cycle log."""
    import re

    args = ["--ft-straggler-report-interval", "0.6", str(WORKER), "--reports", "4"]
    codes, errs = run_two_nodes(tmp_path, "two", [*args, "--slow-rank", "1"], timeout=240)
    assert codes == [0, 0], errs
    named: dict[int, list[dict]] = {}
    slow_node = None
    for k in (0, 1):
        text = (tmp_path / "logs" / "two" / f"cycle_0.node{k}.log").read_text()
        if re.search(r"^\[rank1\]: ", text, re.M):
            slow_node = k
        named[k] = _facts(text, "straggler")
        [scores] = _facts(text, "straggler_scores")
        assert scores["node"] == k and scores["reports"] >= 4
        assert len(scores["ranks"]) == 1  # each node sums up its own rank
    assert slow_node is not None
    assert named[1 - slow_node] == []
    first = named[slow_node][0]
    assert (first["rank"], first["node"], first["reports"]) == (1, slow_node, 2)
    assert first["report"] <= 2 and first["relative"] < 0.7


def test_a_succeeded_cycles_scores_are_kept_in_storage(tmp_path: Path) -> None:
    """A cycle that succeeds is never analysed; its straggler scores still reach the
    history (read from the facts at the end of its log when the launcher records its end)."""
    from relaunch.storage import open_repository

    db = f"sqlite:///{tmp_path / 'h.db'}"
    args = [
        "--nproc-per-node",
        "3",
        "--log-dir",
        str(tmp_path / "logs"),
        "--job-id",
        "okslow",
        "--ft-gpu-health",
        "off",
        "--ft-db-url",
        db,
        "--ft-straggler-report-interval",
        "0.6",
    ]
    worker = [str(WORKER), "--reports", "4", "--base", "0.05", "--slow-rank", "1"]
    r = run_relaunch(tmp_path, args + worker, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    repo = open_repository(db)
    [(cycle, kept)] = repo.stragglers("okslow")
    assert cycle == 0 and kept["persistent"] == [1], kept
    assert set(kept["scores"][0]["ranks"]) == {"0", "1", "2"}
    assert repo.get_cycle("okslow", 0).outcome == "succeeded"
