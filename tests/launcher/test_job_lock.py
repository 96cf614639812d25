"""One launcher per single-node job directory (launcher.job_lock), through real
`relaunch run` processes: a second launcher of a running job stops with exit 2 before
starting anything and names the first one's pid; once the first ends, the job can run
again (the kernel released the lock). Where no lock can be had (an unusable lock directory,
a file system that refuses locks) the job runs unlocked with a warning."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relaunch.launcher import job_lock
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
        [sys.executable, "-m", "relaunch.cli", "run", *_args(tmp_path, "j1", script)]
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


def test_an_unusable_lock_directory_warns_and_the_job_runs(tmp_path: Path) -> None:
    """The lock directory planted as a symlink to someone else's place: not followed, not
    written; a lock must never stop a job that could run, so it runs unlocked and says so."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "relaunch-jobs").symlink_to(target)
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    go = tmp_path / "go"
    go.write_text("")
    env = {**relaunch_env(tmp_path), "XDG_RUNTIME_DIR": str(runtime)}
    r = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "run", *_args(tmp_path, "j3", script)]
        + [str(tmp_path / "p"), str(go)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr
    warn = [x for x in r.stderr.splitlines() if "relaunch: warning: job lock unavailable" in x]
    assert len(warn) == 1, r.stderr
    assert "not a private directory" in warn[0]
    assert list(target.iterdir()) == []  # nothing written through the symlink


def test_a_file_system_that_refuses_locks_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lustre without -o flock answers ENOSYS, NFSv3 without lockd ENOLCK: unlocked, with a
    warning, never a refused run; the lock descriptor is not leaked."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    calls: list[int] = []

    def refuse(fd: int, op: int) -> None:
        calls.append(fd)
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(job_lock.fcntl, "flock", refuse)
    fd, warning = job_lock.acquire(tmp_path / "logs" / "j")
    assert fd is None and warning is not None and "not locked" in warning
    assert "Function not implemented" in warning
    with pytest.raises(OSError):  # the descriptor flock was given is closed again
        os.fstat(calls[0])


def test_lock_is_host_local_and_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not in the (shared) log directory: in the user's private directory, keyed by the job
    directory's real path; a second acquire in this process is refused, a release frees it."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    job = tmp_path / "logs" / "j"
    job.mkdir(parents=True)
    fd, warning = job_lock.acquire(job)
    assert fd is not None and warning is None
    try:
        assert list(job.iterdir()) == []
        d = job_lock.lock_dir()
        assert d == tmp_path / "run" / "relaunch-jobs"
        assert os.stat(d).st_mode & 0o777 == 0o700
        (tmp_path / "alias").symlink_to(tmp_path / "logs")
        with pytest.raises(job_lock.JobLocked, match=rf"pid {os.getpid()}"):
            job_lock.acquire(tmp_path / "alias" / "j")  # the same directory by another path
    finally:
        job_lock.release(fd)
    fd2, _ = job_lock.acquire(job)
    assert fd2 is not None
    job_lock.release(fd2)
