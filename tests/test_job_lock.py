"""One launcher per single-node job directory (launcher.job_lock), through real
`relaunch run` processes: a second launcher of a running job stops with exit 2 before
starting anything and names the first one's pid; once the first ends, the job can run
again (the kernel released the lock); a planted symlink in place of the lock file is a
one-line error, never followed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._launcher_helpers import relaunch_env, run_relaunch

pytestmark = pytest.mark.timeout(300)

WAITER = """
import os, sys, time
from pathlib import Path
Path(sys.argv[1]).write_text(str(os.getpid()))
while not Path(sys.argv[2]).exists():  # the test says when to end
    time.sleep(0.05)
"""


def _args(tmp_path: Path, job: str, script: Path, *extra: str) -> list[str]:
    return [
        "--nproc-per-node",
        "1",
        "--log-dir",
        str(tmp_path / "logs"),
        "--job-id",
        job,
        "--ft-gpu-health",
        "off",
        "--ft-attribution-endpoint",
        "off",
        *extra,
        str(script),
    ]


def test_second_launcher_of_a_running_job_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    pid_file, go = tmp_path / "worker.pid", tmp_path / "go"
    first = subprocess.Popen(
        [sys.executable, "-m", "relaunch_cli", "run", *_args(tmp_path, "j1", script)]
        + [str(pid_file), str(go)],
        cwd=tmp_path,
        env=relaunch_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not pid_file.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pid_file.exists(), first.communicate(timeout=60)[0] if first.poll() else "no worker"
        second = run_relaunch(
            tmp_path, [*_args(tmp_path, "j1", script), str(tmp_path / "w2.pid"), str(go)]
        )
        assert second.returncode == 2, second.stderr
        line = [x for x in second.stderr.splitlines() if "relaunch: error:" in x]
        assert len(line) == 1, second.stderr
        assert "in use by another relaunch run on this host" in line[0]
        assert f"(pid {first.pid})" in line[0]
        assert "no worker was started" in line[0]
        assert not (tmp_path / "w2.pid").exists()  # it started nothing
        # another job id in the same log dir is not affected
        done = tmp_path / "done"
        done.write_text("")
        other = run_relaunch(
            tmp_path, [*_args(tmp_path, "j2", script), str(tmp_path / "o.pid"), str(done)]
        )
        assert other.returncode == 0, other.stderr
    finally:
        go.write_text("")
        out = first.communicate(timeout=120)[0]
    assert first.returncode == 0, out
    again = run_relaunch(tmp_path, [*_args(tmp_path, "j1", script), str(pid_file), str(go)])
    assert again.returncode == 0, again.stderr


def test_a_symlink_planted_as_the_lock_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    job_dir = tmp_path / "logs" / "j3"
    job_dir.mkdir(parents=True)
    (job_dir / ".launcher.lock").symlink_to(target)
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    go = tmp_path / "go"
    go.write_text("")
    r = run_relaunch(tmp_path, [*_args(tmp_path, "j3", script), str(tmp_path / "p"), str(go)])
    assert r.returncode == 2, r.stderr
    assert "relaunch: error:" in r.stderr and "no worker was started" in r.stderr
    assert "Traceback" not in r.stderr
    assert target.read_text() == "keep me\n"
    assert not (tmp_path / "p").exists()
