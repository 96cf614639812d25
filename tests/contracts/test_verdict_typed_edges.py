"""Verdicts typed to the edges (issue 28 item 2): the JSON stays the same, adapters read fields.

- Every verdict stored in `fixtures/verdicts/main_f030448.json` (written by main at f030448
  before `Verdict`'s open dicts were typed: each shape the corpora produce, the LLM-applied
  form, Flight Recorder culprits, node health, stragglers, a reached scan budget, a timed
  scan) reads with `Verdict.from_dict` and writes back byte for byte (`json.dumps` of
  `to_dict()` equals the stored JSON: same keys, same order, same values).
- An older verdict that lacks newer keys (history counts added later, no stragglers, no
  node health, an `llm` of `contributed` only) reads too, with the defaults, and writes
  back exactly as it was stored (no key added).
- Verdicts made now over every log of the corpora write their typed parts with the same
  keys in the same order as main did, and round-trip.
- `Verdict.read`, the lenient reader adapters use at a JSON boundary: an unknown rule id is
  kept as its string, partial evidence reads with defaults, a non-object or a decision
  that is not STOP/RESTART gives None.
- The bar: at most 12 look-ups of verdict fields by string (`x["history"]`,
  `x.get("contributed")`) in the adapter packages, outside the JSON boundaries named in
  `BOUNDARIES` (each with why); counted with `ast`.
"""

from __future__ import annotations

import ast
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from relaunch.restart_agent import model
from relaunch.restart_agent.model import (
    Decision,
    History,
    LLMInfo,
    PriorCycle,
    Rule,
    Verdict,
)
from relaunch.restart_agent.policy import decide
from relaunch.restart_agent.scanner import scan_file

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "fixtures" / "verdicts" / "main_f030448.json"
PARTS = ("history", "budgets", "fan_out", "fr", "llm", "scan", "stragglers")


def _golden() -> dict[str, dict[str, Any]]:
    data: dict[str, dict[str, Any]] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("case", sorted(_golden()))
def test_a_verdict_main_stored_writes_back_byte_for_byte(case: str) -> None:
    stored = _golden()[case]
    v = Verdict.from_dict(stored)
    assert json.dumps(v.to_dict()) == json.dumps(stored)
    # the typed fields hold what the JSON said
    assert v.history.same_root_prior_cycles == stored["history"]["same_root_prior_cycles"]
    assert v.budgets.job_retries_left == stored["budgets"]["job_retries_left"]
    assert v.fan_out.failed_ranks == stored["fan_out"]["failed_ranks"]
    assert v.llm.contributed is stored["llm"]["contributed"]
    assert v.scan.lines == stored["scan"]["lines"]
    if stored["fr"] is not None:
        assert v.fr is not None and v.fr.culprit_ranks == stored["fr"]["culprit_ranks"]
    if stored["stragglers"] is not None:
        assert v.stragglers is not None
        assert v.stragglers.suspect_rank == stored["stragglers"]["suspect_rank"]


def test_the_golden_file_holds_every_part_shape() -> None:
    """The fixture is worth its name: each optional shape is in it at least once."""
    g = list(_golden().values())
    assert any(d["llm"]["contributed"] is True for d in g)
    assert any("not_used_because" in d["llm"] for d in g) or any(
        d["llm"] == {"contributed": False} for d in g
    )
    assert any(d["fr"] is not None for d in g)
    assert any(d["stragglers"] is not None for d in g)
    assert any(d["node_health"] for d in g)
    assert any("budget" in d["scan"] for d in g)
    assert any("seconds" in d["scan"] for d in g)


def test_an_old_verdict_missing_newer_keys_reads_with_defaults_and_writes_back_as_stored() -> None:
    old = json.loads(json.dumps(_golden()["logs/cuda_nccl_cascade_8r.log#2"]))
    for key in ("identical_cycles_progress_unknown", "job_ever_progressed", "progress_basis"):
        del old["history"][key]
    del old["budgets"]["startup_window_s"]
    del old["fan_out"]["all_rank_timeout"]
    del old["stragglers"], old["node_health"]
    old["llm"] = {"contributed": False}
    old["history"]["from_a_future_version"] = [1, 2]  # unknown keys are kept, in place
    v = Verdict.from_dict(old)
    assert v.history.identical_cycles_progress_unknown == 0
    assert v.history.progress_basis is None and v.history.job_ever_progressed is False
    assert v.budgets.startup_window_s == 0.0 and v.fan_out.all_rank_timeout is None
    assert v.stragglers is None and v.node_health == [] and v.llm.contributed is False
    again = v.to_dict()
    del again["stragglers"], again["node_health"]  # Verdict always writes these two
    assert json.dumps(again) == json.dumps(old)


def test_verdicts_made_now_write_their_parts_in_mains_key_order() -> None:
    order = {
        part: list(_golden()["logs/cuda_nccl_cascade_8r.log#2"][part] or {})
        for part in ("history", "budgets", "fan_out", "scan")
    }
    logs = sorted((REPO / "tests" / "fixtures" / "logs").glob("*.log"))
    logs += sorted((REPO / "tests" / "fixtures" / "real").glob("*.log"))[:40]
    assert len(logs) > 20
    for path in logs:
        ev = scan_file(path)
        first = decide(ev).to_dict()
        second = decide(ev, [PriorCycle.from_verdict(0, first)]).to_dict()
        for d in (first, second):
            for part in ("history", "budgets"):
                assert list(d[part]) == order[part], (path.name, part)
            assert [k for k in d["fan_out"] if k != "launcher"] == order["fan_out"]
            assert [k for k in d["scan"] if k != "budget"] == order["scan"]
            assert json.dumps(Verdict.from_dict(d).to_dict()) == json.dumps(d), path.name


def test_read_is_lenient_where_from_dict_is_strict() -> None:
    partial = {
        "decision": "STOP",
        "rule": "workload.certain_stop",  # a rule id of an older version
        "primary": {"failure_class": "python_syntax_error", "line": 42, "rank": 3},
        "history": {"same_root_prior_cycles": 2},
    }
    with pytest.raises((KeyError, ValueError)):
        Verdict.from_dict(partial)
    v = Verdict.read(partial)
    assert v is not None and v.decision is Decision.STOP and v.rule == "workload.certain_stop"
    assert v.primary is not None and v.primary.failure_class == "python_syntax_error"
    assert v.primary.domain is None and v.primary.fingerprint is None
    assert v.history.same_root_prior_cycles == 2 and v.progress.known is False
    known = Verdict.read({**partial, "rule": "stop.same_root_ceiling"})
    assert known is not None and known.rule is Rule.STOP_SAME_ROOT_CEILING
    for bad in (None, [], "STOP", {"decision": "MAYBE"}, {"rule": "x"}):
        assert Verdict.read(bad) is None, bad


def test_llm_info_none_is_contributed_false_only() -> None:
    assert LLMInfo.none().to_dict() == {"contributed": False}
    assert History().to_dict()["same_root_prior_cycles"] == 0  # built: every field


# ---------------------------------------------------------------- the string look-up bar

ADAPTERS = ("web", "storage", "attribution", "relaunch_cli", "launcher/attribution_client.py")
BAR = 12
# (module, function) -> why its look-ups are of JSON at a boundary, not of a verdict in code
BOUNDARIES: dict[tuple[str, str], str] = {
    # an audit artifact is a file that may have been edited: it is checked key by key
    ("attribution/core/audit.py", "_check_shape"): (
        "validates an audit artifact file's JSON shape before anything reads it typed"
    ),
    ("attribution/core/audit.py", "_copies_diffs"): (
        "compares an artifact's top-level copies with its own verdict JSON, key by key"
    ),
    ("attribution/core/audit.py", "recheck"): (
        "compares the recorded verdict JSON with the recomputed one field by field"
    ),
    ("attribution/core/engine.py", "records_node_health"): (
        "asks whether the stored JSON lists exactly this report (a typed read would "
        "normalise the record it compares)"
    ),
    # the Flight Recorder's own findings JSON (not a verdict; `Verdict.fr` is built from it)
    ("attribution/fr/__init__.py", "culprit_ranks"): "reads the FR analysis's own findings JSON",
    ("attribution/fr/analyzer.py", "analyze"): "writes the FR analysis's own findings JSON",
    ("attribution/fr/render.py", "render_text"): "prints the FR analysis's own findings JSON",
    (
        "web/views.py",
        "fr_view",
    ): "shows the FR analysis's stored findings JSON (cycles.fr_findings)",
    ("web/views.py", "llm_view"): (
        "shows the stored LLM enrichment record of any version (cycles.llm; older and "
        "foreign answer shapes too)"
    ),
    ("attribution/core/policy_config.py", "<module>"): (
        "POLICY_LIMITS[...] is the policy config's limits table, not a verdict"
    ),
    # SQL rows: columns named like verdict fields, read where storage makes them records
    ("storage/repository.py", "_overview"): "a SQL row's columns into the job overview",
    ("storage/repository.py", "_cycle_record"): "an evidence row's columns into a CycleRecord",
    ("storage/repository.py", "save_verdict"): (
        "names the bad decision of JSON that Verdict.read refused, in the error"
    ),
    ("storage/dashboard_queries.py", "timeline"): "a SQL row's columns into a timeline row",
    ("web/views.py", "overview_row"): "the storage overview row (the deciding cycle's columns)",
    ("web/views.py", "cycle_row"): (
        "a timeline row's SQL columns (the verdict itself is read typed, via _verdict)"
    ),
    (
        "attribution/mcp/server.py",
        "_job",
    ): "the storage overview row (the deciding cycle's columns)",
    # the dashboard's own view rows (built by web.views from typed verdicts and rows)
    ("web/views.py", "progress_plot"): "reads the view rows cycle_row built",
    ("web/charts.py", "verdict_class"): "reads a view row cycle_row built",
    ("web/charts.py", "failure_strip"): "reads the view rows cycle_row built",
}


def _field_names() -> set[str]:
    names = {f.name for f in fields(Verdict)}
    for part in (model.History, model.Budgets, model.FanOut, model.FRFindings):
        names |= {f.name for f in fields(part) if f.name not in ("keys_", "extra")}
    names |= {f.name for f in fields(model.StragglerReport) if f.name not in ("keys_", "extra")}
    return names | {"contributed"}


def _lookups(path: Path, names: set[str]) -> list[tuple[str, int, str]]:
    """(function, line, key) of every `x["key"]` / `x.get("key", ...)` with a field name."""
    out: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, fn: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            key = None
            if isinstance(child, ast.Subscript) and isinstance(child.slice, ast.Constant):
                key = child.slice.value
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr == "get"
                and child.args
                and isinstance(child.args[0], ast.Constant)
            ):
                key = child.args[0].value
            if isinstance(key, str) and key in names:
                out.append((fn, child.lineno, key))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return out


def verdict_field_lookups() -> list[str]:
    """`path:line function key` of each look-up the bar counts."""
    names = _field_names()
    found: list[str] = []
    for entry in ADAPTERS:
        base = REPO / entry
        paths = [base] if base.is_file() else sorted(base.rglob("*.py"))
        for path in paths:
            rel = path.relative_to(REPO).as_posix()
            for fn, line, key in _lookups(path, names):
                if (rel, fn) not in BOUNDARIES:
                    found.append(f"{rel}:{line} {fn} {key}")
    return found


def test_the_counter_sees_a_string_lookup(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "def f(v):\n    return v['history'].get('same_root_prior_cycles'), v.get('other')\n"
    )
    assert sorted(k for _, _, k in _lookups(src, _field_names())) == [
        "history",
        "same_root_prior_cycles",
    ]


def test_at_most_twelve_string_lookups_of_verdict_fields_outside_json_boundaries() -> None:
    found = verdict_field_lookups()
    assert len(found) <= BAR, "\n".join(found)


def test_every_boundary_named_exists_and_says_why() -> None:
    for (rel, fn), why in BOUNDARIES.items():
        tree = ast.parse((REPO / rel).read_text(encoding="utf-8"))
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert fn in names | {"<module>"}, f"{rel}: no function {fn}"
        assert len(why) > 20, (rel, fn)
