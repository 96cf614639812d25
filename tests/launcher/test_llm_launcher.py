"""`relaunch run --ft-llm-*`: the embedded launcher path end to end, against the loopback
OpenAI-compatible server: the deterministic verdict comes first, a grounded answer then
shortens a probable workload bug's retry budget and the job stops a cycle earlier."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._launcher_helpers import WORKER, cycle_logs, engine_available, job_args, run_relaunch
from tests._llm_helpers import KEY
from tests._llm_server import LLMServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


QUOTE = "KeyError: 'warmup_steps'"


def _run(tmp_path: Path, job: str, server: LLMServer, model: str, key: Path):  # type: ignore[no-untyped-def]
    return run_relaunch(
        tmp_path,
        job_args(
            tmp_path,
            job,
            "--max-restarts",
            "4",
            "--ft-llm-base-url",
            server.base_url,
            "--ft-llm-model",
            model,
            "--ft-llm-api-key-file",
            str(key),
            "--ft-llm-timeout",
            "20",
            "--ft-attribution-stop-action",  # a STOP is only logged by default: act on it
            "no-restart",
        )  # fmt: skip
        # 2 s between a cycle's start and its KeyError: time for the model, even under load
        + [str(WORKER), "--mode", "bug", "--step-sleep", "1"],
        timeout=120,
    )


def _db(tmp_path: Path):  # type: ignore[no-untyped-def]
    from relaunch.storage import open_repository

    return open_repository(f"sqlite:///{tmp_path / 'home' / 'relaunch.db'}")


def test_grounded_answer_stops_the_workload_bug_after_its_first_cycle(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    if why := engine_available():
        pytest.skip(why)
    model = llm_server.script([{"cite": {"quote": QUOTE}}])
    r = _run(tmp_path, "llmstop", llm_server, model, key_file)
    assert r.returncode == 3, r.stderr
    verdicts = re.findall(
        r"verdict cycle=(\d+) decision=(\w+) \[([\w.]+)\] source=([\w+]+)", r.stderr
    )
    assert verdicts[0] == ("0", "RESTART", "restart.workload_first", "embedded"), verdicts
    assert ("0", "STOP", "llm_grounded_workload_bug", "embedded+llm") in verdicts, verdicts
    # the STOP came while cycle 1 ran (2 s; the model answers at once): no cycle 2
    assert cycle_logs(tmp_path, "llmstop") == ["cycle_0.log", "cycle_1.log"], r.stderr
    repo = _db(tmp_path)
    rec = repo.get_cycle("llmstop", 0)
    repo.close()
    assert rec.llm["status"] == "ok" and rec.llm["grounded"] is True
    assert rec.llm["contributed"] is True and rec.verdict["decision"] == "STOP"
    requests = llm_server.requests(model)
    assert requests and all(q["authorization"] == f"Bearer {KEY}" for q in requests)
    sent = "\n".join(str(m.get("content")) for m in requests[0]["body"]["messages"])
    assert QUOTE in sent  # the log excerpt went to the model
    assert KEY not in r.stderr + r.stdout
    audit = tmp_path / "logs" / "audit" / "llmstop"
    assert KEY not in "".join(p.read_text() for p in audit.glob("*.json"))


def test_a_failing_model_leaves_the_deterministic_verdicts_alone(
    llm_server: LLMServer, key_file: Path, tmp_path: Path
) -> None:
    if why := engine_available():
        pytest.skip(why)
    model = llm_server.script([{"status": 500, "echo_key": True}])
    r = _run(tmp_path, "llmfail", llm_server, model, key_file)
    assert r.returncode == 3, r.stderr  # the deterministic recurrence rule stops it
    verdicts = re.findall(
        r"verdict cycle=(\d+) decision=(\w+) \[([\w.]+)\] source=([\w+]+)", r.stderr
    )
    assert verdicts[:2] == [
        ("0", "RESTART", "restart.workload_first", "embedded"),
        ("1", "STOP", "stop.workload_recurrence", "embedded"),
    ], verdicts
    assert all(src == "embedded" for *_, src in verdicts)
    # cycle 1's STOP is decided once cycle 2 is under way: one cycle more than with the LLM
    assert "cycle_2.log" in cycle_logs(tmp_path, "llmfail"), r.stderr
    assert KEY not in r.stderr + r.stdout
