"""The restart agent and straggler facts: the reader, the suspect rule, the verdict field.

Fact lines are written by the launcher's own scorer (`launcher.straggler.scores`), so the
reader is tested against the writer's real output, plus hand-made malformed lines."""

from __future__ import annotations

import json

from relaunch.launcher.straggler.scores import StragglerScorer
from relaunch.restart_agent import decide
from tests._agent_helpers import fact, scan_text

WATCHDOG = "".join(
    f"[rank{r}]: [E1202 10:21:13 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective"
    f" operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE) ran for 600123 milliseconds before timing out.\n"
    for r in (0, 1, 3)
)
START = fact("cycle_start", job="j", node="n0", ranks=[0, 1, 2, 3], world_size=4, t=1.0)


def straggler_lines(slow: int | None, reports: int, slowdown: float = 5.0) -> str:
    """What the launcher writes for `reports` reports of 4 ranks, `slow` taking longer."""
    lines: list[str] = []
    scorer = StragglerScorer(0, "n0", range(4), 0.7, lambda s: lines.append("[relaunch] " + s))
    for n in range(1, reports + 1):
        for r in range(4):
            med = 20_000_000 * (slowdown if r == slow else 1.0)
            scorer.add(r, n, {"fwd": [10, int(med), int(med), int(med) * 10]})
    summary = scorer.summary_fact()
    return "\n".join(lines) + "\n", ("[relaunch] " + summary + "\n") if summary else ""


def test_scorer_output_is_a_fact_the_reader_takes() -> None:
    named, summary = straggler_lines(2, 4)
    ev = scan_text(START + named + summary)
    facts = ev.launcher
    assert facts is not None
    assert [(s["rank"], s["reports"], s["section"]) for s in facts.stragglers] == [(2, 4, "fwd")]
    assert facts.stragglers[0]["relative"] == 0.2 and facts.stragglers[0]["threshold"] == 0.7
    # the first fact (2 reports) was on the line before the latest one (4 reports)
    assert facts.stragglers[0]["since_line"] < facts.stragglers[0]["line"]
    (scores,) = facts.straggler_scores
    assert scores["reports"] == 4 and scores["node"] == "n0"
    assert scores["ranks"]["2"]["below"] == 4 and scores["ranks"]["0"]["below"] == 0


def test_watchdog_cascade_after_a_persistent_straggler_blames_it_without_changing_the_decision() -> (
    None
):
    named, summary = straggler_lines(2, 3)
    with_straggler = decide(scan_text(START + named + WATCHDOG + summary))
    without = decide(scan_text(START + WATCHDOG))
    assert with_straggler.primary is not None and without.primary is not None
    assert with_straggler.primary.rank == 2 and with_straggler.primary.node == "n0"
    assert with_straggler.primary.rank_source == "straggler"
    assert with_straggler.primary.failure_class == without.primary.failure_class
    assert (with_straggler.decision, with_straggler.rule) == (without.decision, without.rule)
    assert "persistent straggler" in with_straggler.to_dict()["fan_out"]["primary_reason"]
    s = with_straggler.to_dict()["stragglers"]
    assert s["suspect_rank"] == 2 and s["persistent"] == [2]
    assert s["named"][0]["relative"] == 0.2 and s["named"][0]["reports"] == 2
    assert "straggler" in with_straggler.basis
    assert without.to_dict()["stragglers"] is None
    json.dumps(with_straggler.to_dict())


def test_hang_after_a_persistent_straggler_names_the_straggler() -> None:
    named, _ = straggler_lines(1, 2)
    hang = "[relaunch] hang detected: rank 3 sent no heartbeat for 61.2 s; also silent: ranks 0,2\n"
    v = decide(scan_text(START + named + hang))
    assert v.primary is not None and v.primary.failure_class == "hang_detected"
    assert (v.primary.rank, v.primary.rank_source) == (1, "straggler")


def test_a_straggler_named_once_or_after_the_timeout_or_before_a_real_error_is_not_the_suspect() -> (
    None
):
    once = "[relaunch] fact: " + json.dumps(
        {
            "fact": "straggler",
            "cycle": 0,
            "rank": 2,
            "node": "n0",
            "section": "fwd",
            "relative": 0.3,
            "individual": 0.3,
            "threshold": 0.7,
            "reports": 1,
        }
    )
    v = decide(scan_text(START + once + "\n" + WATCHDOG))
    assert v.primary is not None and v.primary.rank_source != "straggler"
    named, _ = straggler_lines(2, 2)
    late = decide(scan_text(START + WATCHDOG + named))  # named after the timeout: no suspect
    assert late.primary is not None and late.primary.rank_source != "straggler"
    assert late.to_dict()["stragglers"]["suspect_rank"] is None
    oom = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    root = decide(scan_text(START + named + oom + WATCHDOG))
    assert root.primary is not None and root.primary.rank == 3 and root.primary.role == "root"
    assert root.primary.rank_source != "straggler"


def test_no_straggler_when_every_rank_is_alike() -> None:
    named, summary = straggler_lines(None, 20)
    assert named.strip() == ""
    v = decide(scan_text(START + summary + WATCHDOG))
    s = v.to_dict()["stragglers"]
    assert s["named"] == [] and s["suspect_rank"] is None
    assert v.primary is not None and v.primary.rank_source != "straggler"


def test_malformed_straggler_facts_are_ignored() -> None:
    bad = [
        {
            "fact": "straggler",
            "cycle": 0,
            "rank": -1,
            "relative": 0.2,
            "threshold": 0.7,
            "reports": 2,
        },
        {
            "fact": "straggler",
            "cycle": 0,
            "rank": 1,
            "relative": "x",
            "threshold": 0.7,
            "reports": 2,
        },
        {
            "fact": "straggler",
            "cycle": 0,
            "rank": 1,
            "relative": 0.2,
            "threshold": 0.7,
            "reports": 0,
        },
        {"fact": "straggler", "cycle": 0, "rank": 1, "relative": 0.2, "reports": 2},
        {"fact": "straggler_scores", "cycle": 0, "threshold": 0.7, "ranks": [1, 2]},
        {"fact": "straggler_scores", "cycle": 0, "threshold": 0.7, "ranks": {"x": {}, "1": "y"}},
    ]
    text = START + "".join("[relaunch] fact: " + json.dumps(b) + "\n" for b in bad) + WATCHDOG
    text += '[relaunch] fact: {"fact":"straggler",\n'
    ev = scan_text(text)
    assert ev.launcher is not None and ev.launcher.stragglers == []
    # the one with a dict of ranks is a (empty) summary, the list one is not
    assert [s["ranks"] for s in ev.launcher.straggler_scores] == [{}]
    v = decide(ev)
    assert v.primary is not None and v.primary.rank_source != "straggler"


def test_a_gloo_timeout_whose_rank_the_launcher_saw_exit_blames_the_straggler() -> None:
    """Rank 0 times out in a gloo recv waiting on slow rank 2, prints the timeout (a
    cascade) and exits 1; the launcher saw rank 0 exit first. The exit has no error of its
    own, so the persistent straggler is still the suspect."""
    named, summary = straggler_lines(2, 3)
    timeout = (
        "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81]"
        " Timed out waiting 30000ms for recv operation to complete\n"
    )
    exit0 = fact(
        "rank_exit", rank=0, local_rank=0, node="n0", exitcode=1, signal=None, first=True, t_s=40.0
    )
    v = decide(scan_text(START + named + timeout + exit0 + summary))
    assert v.primary is not None and v.primary.rank == 2, v.to_dict()["primary"]
    assert v.primary.rank_source == "straggler"
    assert v.to_dict()["stragglers"]["suspect_rank"] == 2
