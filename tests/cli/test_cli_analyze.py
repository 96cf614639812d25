"""`relaunch analyze` as a user runs it: a real subprocess, real logs, a real SQLite file."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from relaunch.storage import open_repository
from tests._cli_helpers import hermetic_env, run_analyze
from tests._storage_helpers import (
    REPO_ROOT,
    infra_log,
    pg_url_or_skip,
    sqlite_url,
    syntax_log,
    workload_log,
)

SPEC_KEYS = {"decision", "basis", "rule", "primary", "cascades", "progress", "history"}
PRIMARY_KEYS = {"failure_class", "line", "rank", "fingerprint", "text"}


def analyze_json(*args: str | Path) -> dict:
    p = run_analyze(*args, "--format", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)  # exactly one JSON object, nothing else on stdout


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_json_output_has_the_spec_keys(tmp_path):
    log = write(tmp_path, "cycle_0.log", infra_log())
    v = analyze_json(log)
    assert set(v) >= SPEC_KEYS
    assert v["decision"] in ("STOP", "RESTART")
    assert set(v["primary"]) >= PRIMARY_KEYS
    assert v["primary"]["failure_class"] == "nccl_error" and v["primary"]["rank"] == 2
    assert isinstance(v["primary"]["line"], int)
    assert "last_iteration" in v["progress"] and v["progress"]["last_iteration"] == 100
    assert "same_root_prior_cycles" in v["history"]
    assert "job_id" not in v  # nothing saved without --db


def test_text_output_verdict_first_then_why_then_evidence(tmp_path):
    log = write(tmp_path, "cycle_0.log", syntax_log())
    p = run_analyze(log)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("STOP")
    assert lines[1].startswith("why:") and lines[2].startswith("rule:")
    text = p.stdout
    assert "python_syntax_error" in text and "SyntaxError: invalid syntax" in text
    assert text.index("why:") < text.index("evidence:")
    line_no = json.loads(run_analyze(log, "--format", "json").stdout)["primary"]["line"]
    assert f"line {line_no}" in text


def test_infrastructure_failure_recurring_without_progress_stops_at_the_ceiling(tmp_path):
    db = sqlite_url(tmp_path)
    log = write(tmp_path, "stuck.log", infra_log(last_iteration=100))
    got = [analyze_json(log, "--db", db, "--job-id", "j", "--cycle", c) for c in range(4)]
    assert [v["decision"] for v in got] == ["RESTART", "RESTART", "RESTART", "STOP"]
    assert [v["history"]["same_root_prior_cycles"] for v in got] == [0, 1, 2, 3]
    assert [v["cycle"] for v in got] == [0, 1, 2, 3]
    con = sqlite3.connect(tmp_path / "relaunch.db")
    rows = con.execute("SELECT cycle, decision FROM cycles ORDER BY cycle").fetchall()
    assert rows == [(0, "RESTART"), (1, "RESTART"), (2, "RESTART"), (3, "STOP")]
    con.close()


def test_progress_between_cycles_keeps_restarting(tmp_path):
    db = sqlite_url(tmp_path)
    for c in range(6):
        log = write(tmp_path, f"c{c}.log", infra_log(last_iteration=100 + 40 * c))
        v = analyze_json(log, "--db", db, "--job-id", "moving", "--cycle", c)
        assert v["decision"] == "RESTART", v["basis"]


def test_workload_bug_recurring_stops_at_the_second_cycle(tmp_path):
    db = sqlite_url(tmp_path)
    log = write(tmp_path, "w.log", workload_log(last_iteration=50))
    first = analyze_json(log, "--db", db, "--job-id", "w", "--cycle", "1")
    second = analyze_json(log, "--db", db, "--job-id", "w", "--cycle", "2")
    assert (
        first["decision"] == "RESTART" and first["primary"]["failure_class"] == "python_key_error"
    )
    assert second["decision"] == "STOP"
    assert second["history"]["same_root_prior_cycles"] == 1


def test_certain_workload_bug_stops_at_once(tmp_path):
    v = analyze_json(
        write(tmp_path, "s.log", syntax_log()), "--db", sqlite_url(tmp_path), "--job-id", "s"
    )
    assert v["decision"] == "STOP" and v["cycle"] == 0


def test_cycle_defaults_to_the_next_one_and_history_persists(tmp_path):
    db = sqlite_url(tmp_path)
    logs = [write(tmp_path, f"i{n}.log", infra_log()) for n in range(4)]
    cycles = [analyze_json(log, "--db", db, "--job-id", "auto")["cycle"] for log in logs[:3]]
    assert cycles == [0, 1, 2]
    v = analyze_json(logs[3], "--db", db, "--job-id", "auto")
    assert v["cycle"] == 3 and v["history"]["same_root_prior_cycles"] == 3
    assert v["log"]["size"] == logs[3].stat().st_size and len(v["log"]["sha256"]) == 64
    assert v["log"]["path"] == str(logs[3].resolve())  # stored absolute
    # issue 25: a log the history knows is its cycle again, no phantom next cycle
    again = analyze_json(logs[1], "--db", db, "--job-id", "auto")
    assert again["cycle"] == 1 and again["history"]["same_root_prior_cycles"] == 1


def test_a_relative_log_path_is_stored_absolute(tmp_path):
    """`relaunch analyze i.log` from the log's folder stores the absolute path, so a later
    run from anywhere finds that cycle again (issue 25: stored paths are absolute)."""
    db = sqlite_url(tmp_path)
    write(tmp_path, "rel.log", infra_log())
    p = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "analyze", "rel.log", "--db", db]
        + ["--job-id", "rel", "--format", "json"],
        cwd=tmp_path, env=hermetic_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    stored = json.loads(p.stdout)["log"]["path"]
    assert stored == str((tmp_path / "rel.log").resolve())
    assert analyze_json(tmp_path / "rel.log", "--db", db, "--job-id", "rel")["cycle"] == 0


def test_history_is_said_in_text_and_json(tmp_path):
    log = write(tmp_path, "i.log", infra_log())
    p = run_analyze(log, "--format", "json")
    assert p.returncode == 0, p.stderr
    v = json.loads(p.stdout)
    assert v["history_db"] == {
        "used": False,
        "source": "none",
        "saved": False,
        "says": "history: none (no --job-id: decided without earlier cycles)",
    }
    assert p.stderr == ""  # no history: said in the output, not on stderr
    text = run_analyze(log).stdout
    assert "stored:    history: none (no --job-id: decided without earlier cycles)" in text
    # --job-id without --db: the default history is read (here: none exists), never created
    p = run_analyze(log, "--job-id", "j", "--format", "json")
    assert "history: none (no history database at" in json.loads(p.stdout)["history_db"]["says"]


def test_default_history_is_read_not_written(tmp_path):
    db = tmp_path / "relaunch.db"
    log = write(tmp_path, "w.log", workload_log())
    analyze_json(log, "--db", f"sqlite:///{db}", "--job-id", "j", "--cycle", "0")
    env = {**hermetic_env(), "RELAUNCH_DB": f"sqlite:///{db}"}
    p = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "analyze", str(write(tmp_path, "w1.log", workload_log()))]
        + ["--job-id", "j", "--format", "json"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    v = json.loads(p.stdout)
    assert v["cycle"] == 1 and v["history"]["same_root_prior_cycles"] == 1  # what run saw
    assert v["history_db"]["source"] == "$RELAUNCH_DB" and v["history_db"]["saved"] is False
    assert "not saved: pass --db URL" in v["history_db"]["says"]
    assert f"history: {db}" in p.stderr
    repo = open_repository(f"sqlite:///{db}")
    assert [c.cycle for c in repo.list_cycles("j")] == [0]  # nothing recorded
    repo.close()


def test_without_db_history_is_empty_every_time(tmp_path):
    log = write(tmp_path, "w.log", workload_log())
    for _ in range(3):
        v = analyze_json(log, "--job-id", "j", "--cycle", "7")
        assert v["decision"] == "RESTART" and v["history"]["same_root_prior_cycles"] == 0


def test_reanalysing_a_cycle_replaces_it(tmp_path):
    db = sqlite_url(tmp_path)
    w = write(tmp_path, "w.log", workload_log())
    s = write(tmp_path, "s.log", syntax_log())
    analyze_json(w, "--db", db, "--job-id", "j", "--cycle", "0")
    v = analyze_json(s, "--db", db, "--job-id", "j", "--cycle", "0")
    assert v["decision"] == "STOP"
    con = sqlite3.connect(tmp_path / "relaunch.db")
    assert con.execute("SELECT count(*), max(failure_class) FROM cycles").fetchone() == (
        1,
        "python_syntax_error",
    )
    con.close()


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("empty.log", b""),
        ("binary.log", bytes(range(256)) * 64),
        ("latin1.log", "[rank0]: Fehler: Größe ungültig \xe9\n".encode("latin-1")),
        ("crlf.log", syntax_log().replace("\n", "\r\n").encode()),
        ("truncated.log", infra_log().encode()[:-30]),
    ],
)
def test_odd_logs_are_analysed_not_crashed_on(tmp_path, name, data):
    log = write(tmp_path, name, data)
    v = analyze_json(log, "--db", sqlite_url(tmp_path), "--job-id", "odd")
    assert v["decision"] in ("STOP", "RESTART")
    assert v["log"]["size"] == len(data)
    if name == "empty.log":
        assert v["decision"] == "RESTART" and v["primary"] is None
        assert v["progress"]["last_iteration"] is None
    if name == "crlf.log":
        assert v["decision"] == "STOP"
    p = run_analyze(log)  # text output too
    assert p.returncode == 0 and p.stdout.split()[0] in ("STOP", "RESTART")


@pytest.mark.slow
def test_two_gigabyte_sparse_log_is_analysed(tmp_path):
    log = tmp_path / "sparse.log"
    with open(log, "wb") as f:
        f.truncate(2 * 1024**3)
        f.seek(2 * 1024**3 - 200)
        f.write(b"\n[rank0]: SyntaxError: invalid syntax\n")
    v = analyze_json(log)
    assert v["decision"] == "STOP"
    assert v["primary"]["failure_class"] == "python_syntax_error"


def _one_line_error(p: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert p.returncode == code, (p.returncode, p.stderr)
    assert p.stdout == ""
    err = p.stderr.strip()
    assert "Traceback" not in err
    assert needle in err
    assert err.count("\n") == 0 or p.returncode == 2 and err.startswith("usage:"), err


def test_missing_file(tmp_path):
    _one_line_error(run_analyze(tmp_path / "nope.log"), 2, "no such file")


def test_directory(tmp_path):
    _one_line_error(run_analyze(tmp_path), 2, "is a directory")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_device_is_not_a_log(device):
    if not os.path.exists(device):
        pytest.skip(f"{device} does not exist here")
    _one_line_error(run_analyze(device), 2, "not a regular file")


def test_fifo_is_not_a_log(tmp_path):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    _one_line_error(run_analyze(fifo), 2, "not a regular file")


def test_broken_symlink(tmp_path):
    link = tmp_path / "dangling.log"
    link.symlink_to(tmp_path / "gone.log")
    _one_line_error(run_analyze(link), 2, "broken symbolic link")


def test_unreadable_file(tmp_path):
    log = write(tmp_path, "secret.log", infra_log())
    log.chmod(0)
    _one_line_error(run_analyze(log, prefix=_no_dac_prefix()), 2, "permission denied")


def _no_dac_prefix() -> tuple[str, ...]:
    """As root, run without the capabilities that bypass file modes; as a user, nothing."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root and util-linux setpriv is absent: cannot drop DAC caps")
    return (setpriv, "--bounding-set", "-dac_override,-dac_read_search")


def test_read_only_database_is_a_database_error_and_keeps_history(tmp_path):
    dbdir = tmp_path / "ro"
    dbdir.mkdir()
    db = f"sqlite:///{dbdir / 'relaunch.db'}"
    log = write(tmp_path, "i.log", infra_log())
    analyze_json(log, "--db", db, "--job-id", "j")
    (dbdir / "relaunch.db").chmod(0o444)
    dbdir.chmod(0o555)
    try:
        p = run_analyze(log, "--db", db, "--job-id", "j", prefix=_no_dac_prefix())
    finally:
        dbdir.chmod(0o755)
        (dbdir / "relaunch.db").chmod(0o644)
    _one_line_error(p, 3, "readonly database")
    v = analyze_json(write(tmp_path, "i1.log", infra_log()), "--db", db, "--job-id", "j")
    assert v["cycle"] == 1 and v["history"]["same_root_prior_cycles"] == 1


def test_negative_cycle(tmp_path):
    log = write(tmp_path, "i.log", infra_log())
    p = run_analyze(log, "--db", sqlite_url(tmp_path), "--job-id", "j", "--cycle", "-1")
    _one_line_error(p, 2, "argument --cycle: must be between 0 and 2147483647, got -1")
    assert not (tmp_path / "relaunch.db").exists()


def test_non_integer_cycle(tmp_path):
    p = run_analyze(write(tmp_path, "i.log", infra_log()), "--cycle", "three")
    _one_line_error(p, 2, "argument --cycle: expected an integer, got 'three'")


def test_db_without_job_id(tmp_path):
    p = run_analyze(write(tmp_path, "i.log", infra_log()), "--db", sqlite_url(tmp_path))
    _one_line_error(p, 2, "--db needs --job-id")


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("definitely not a url", "not a database URL"),
        ("nosuchdb://h/x", "unsupported database URL scheme"),
    ],
)
def test_bad_db_url(tmp_path, url, needle):
    p = run_analyze(write(tmp_path, "i.log", infra_log()), "--db", url, "--job-id", "j")
    _one_line_error(p, 3, needle)


def test_db_that_is_not_a_database_keeps_its_bytes(tmp_path):
    bad = write(tmp_path, "notes.db", b"my notes, not a database\n" * 50)
    p = run_analyze(
        write(tmp_path, "i.log", infra_log()), "--db", f"sqlite:///{bad}", "--job-id", "j"
    )
    _one_line_error(p, 3, "cannot open database")
    assert bad.read_bytes() == b"my notes, not a database\n" * 50


def test_bad_input_loses_no_history(tmp_path):
    db = sqlite_url(tmp_path)
    log = write(tmp_path, "i.log", infra_log())
    analyze_json(log, "--db", db, "--job-id", "j", "--cycle", "0")
    assert run_analyze(tmp_path / "missing.log", "--db", db, "--job-id", "j").returncode == 2
    assert run_analyze(log, "--db", db, "--job-id", "j", "--cycle", "-5").returncode == 2
    v = analyze_json(write(tmp_path, "i1.log", infra_log()), "--db", db, "--job-id", "j")
    assert v["cycle"] == 1 and v["history"]["same_root_prior_cycles"] == 1


def test_history_bound_from_environment(tmp_path):
    db = sqlite_url(tmp_path)
    log = write(tmp_path, "i.log", infra_log())
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RELAUNCH_MAX_CYCLES_PER_JOB": "2"}
    for c in range(4):
        p = subprocess.run(
            [sys.executable, "-m", "relaunch.cli", "analyze", str(log), "--db", db]
            + ["--job-id", "b", "--cycle", str(c), "--format", "json"],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
    con = sqlite3.connect(tmp_path / "relaunch.db")
    assert con.execute("SELECT cycle FROM cycles ORDER BY cycle").fetchall() == [(2,), (3,)]
    con.close()


@pytest.mark.slow
def test_concurrent_invocations_on_one_database(tmp_path):
    db = sqlite_url(tmp_path)
    log = write(tmp_path, "i.log", infra_log())
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    base = [
        sys.executable,
        "-m",
        "relaunch.cli",
        "analyze",
        str(log),
        "--db",
        db,
        "--format",
        "json",
    ]
    # three processes analyse the same (job, cycle) at once, three others a cycle each
    cmds = [base + ["--job-id", "same", "--cycle", "0"] for _ in range(3)]
    cmds += [base + ["--job-id", "each", "--cycle", str(c)] for c in range(3)]
    procs = [
        subprocess.Popen(c, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for c in cmds
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        assert json.loads(out)["decision"] == "RESTART"
    con = sqlite3.connect(tmp_path / "relaunch.db")
    rows = con.execute(
        "SELECT j.job_id, c.cycle FROM cycles c JOIN jobs j ON j.id = c.job_pk ORDER BY 1, 2"
    ).fetchall()
    assert rows == [("each", 0), ("each", 1), ("each", 2), ("same", 0)]
    con.close()


def test_history_persists_in_postgresql(tmp_path):
    db = pg_url_or_skip()
    # four cycles, each its own log (issue 25: the log of a known cycle is that cycle again)
    logs = [write(tmp_path, f"stuck{n}.log", infra_log(last_iteration=100)) for n in range(4)]
    got = [analyze_json(log, "--db", db, "--job-id", "pg")["decision"] for log in logs]
    assert got == ["RESTART", "RESTART", "RESTART", "STOP"]


def test_db_job_state_follows_the_verdict(tmp_path):
    """The dashboard shows (and stops polling) a job that a STOP verdict ended."""
    from relaunch import storage

    db = sqlite_url(tmp_path)
    analyze_json(write(tmp_path, "i.log", infra_log()), "--db", db, "--job-id", "st")
    repo = storage.open_repository(db)
    assert repo.get_job("st").state == "running"
    analyze_json(write(tmp_path, "s.log", syntax_log()), "--db", db, "--job-id", "st")
    assert repo.get_job("st").state == "stopped"
    repo.close()
