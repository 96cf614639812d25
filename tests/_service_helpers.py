"""Start the real `relaunch serve` process for tests, and tear it down.

Usage (any test module; the `service_factory` fixture is in tests/conftest.py)::

    def test_x(service_factory, tmp_path):
        svc = service_factory()                  # TCP on 127.0.0.1, a free port
        svc_uds = service_factory(uds=True)      # or on a Unix socket
        with svc.client() as c:                  # httpx.Client bound to the service
            assert c.get("/healthz").json()["status"] == "ok"

`start_service(tmp_path, ...)` / `RunningService` work without pytest too. Every service
gets its own SQLite file, allowed root (`svc.root`), audit dir and RELAUNCH_HOME under
`tmp_path` unless given. `svc.restart()` stops and starts the same configuration (same
database), `svc.stop()` ends it (SIGTERM, then SIGKILL); its output is in `svc.log_file`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def require_restart_agent() -> None:
    """Skip the calling test module until the restart agent's scanner exists (issue 2)."""
    from relaunch import restart_agent

    if not all(hasattr(restart_agent, n) for n in ("LogScanner", "scan_file", "decide")):
        pytest.skip(
            "restart_agent.LogScanner/scan_file/decide not available yet (issue 2)",
            allow_module_level=True,
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for `python -m relaunch_cli ...` subprocesses: the repo on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    return env


@dataclass
class RunningService:
    """A `relaunch serve` subprocess and how to reach it."""

    workdir: Path
    root: Path
    db_url: str
    audit_dir: Path | None
    uds: Path | None = None
    port: int | None = None
    token: str | None = None
    extra_args: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log_file: Path | None = None
    starts: int = 0

    @property
    def base_url(self) -> str:
        return "http://relaunch" if self.uds else f"http://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        """The endpoint as `relaunch run --ft-attribution-endpoint` spells it."""
        return f"unix://{self.uds}" if self.uds else self.base_url

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "relaunch.cli", "serve", "--db", self.db_url]
        argv += ["--allowed-root", str(self.root)]
        if self.audit_dir is not None:
            argv += ["--audit-dir", str(self.audit_dir)]
        argv += ["--data-dir", str(self.workdir / "data"), "--log-level", "warning"]
        if self.uds:
            argv += ["--uds", str(self.uds)]
        else:
            argv += ["--host", "127.0.0.1", "--port", str(self.port)]
        if self.token:
            token_file = self.workdir / "token"
            token_file.write_text(self.token + "\n")
            token_file.chmod(0o600)
            argv += ["--token-file", str(token_file)]
        return argv + list(self.extra_args)

    def client(
        self, *, token: str | None | bool = True, timeout: float = 30.0, **kw: Any
    ) -> httpx.Client:
        """An httpx client for this service; `token=True` sends the service's token. It says
        `X-Relaunch-Client` (a programmatic client: its uploads without a Content-Type pass
        the cross-site guard, attribution/service/guards.py) unless `headers` says otherwise."""
        headers = {"X-Relaunch-Client": "tests", **dict(kw.pop("headers", {}))}
        tok = self.token if token is True else (token or None)
        if tok:
            headers["Authorization"] = f"Bearer {tok}"
        transport = httpx.HTTPTransport(uds=str(self.uds)) if self.uds else None
        return httpx.Client(
            base_url=self.base_url, transport=transport, headers=headers, timeout=timeout, **kw
        )

    def async_client(self, *, timeout: float = 30.0, **kw: Any) -> httpx.AsyncClient:
        headers = {"X-Relaunch-Client": "tests", **dict(kw.pop("headers", {}))}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        transport = httpx.AsyncHTTPTransport(uds=str(self.uds)) if self.uds else None
        return httpx.AsyncClient(
            base_url=self.base_url, transport=transport, headers=headers, timeout=timeout, **kw
        )

    def start(self, timeout: float = 60.0) -> RunningService:
        if self.uds is None and (self.port is None or self.starts):
            self.port = free_port()
        self.starts += 1
        self.log_file = self.workdir / f"serve.{self.starts}.log"
        with open(self.log_file, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv(),
                cwd=str(REPO_ROOT),
                env=cli_env({"RELAUNCH_HOME": str(self.workdir / "home"), **self.env}),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"relaunch serve exited {self.proc.returncode}:\n{self.output()}"
                )
            try:
                with self.client(timeout=2.0) as c:
                    if c.get("/healthz").status_code in (200, 503):
                        return self
            except httpx.HTTPError as exc:
                last = exc
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"relaunch serve did not answer /healthz ({last}):\n{self.output()}")

    def output(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file else ""

    def stop(self, timeout: float = 10.0) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        return proc.returncode

    def restart(self) -> RunningService:
        self.stop()
        return self.start()


def start_service(
    tmp_path: Path,
    *,
    uds: bool = False,
    token: str | None = None,
    root: Path | None = None,
    db_url: str | None = None,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    name: str = "svc",
    audit: bool = True,
) -> RunningService:
    """Start `relaunch serve` with its own files under `tmp_path/name`; wait for /healthz.

    `audit=False` runs it without `--audit-dir`.
    """
    workdir = tmp_path / name
    workdir.mkdir(parents=True, exist_ok=True)
    root = root or (tmp_path / "logs")
    root.mkdir(parents=True, exist_ok=True)
    audit_dir = workdir / "audit"
    svc = RunningService(
        workdir=workdir,
        root=root,
        db_url=db_url or f"sqlite:///{workdir / 'relaunch.db'}",
        audit_dir=audit_dir if audit else None,
        # AF_UNIX paths are limited to ~107 bytes: keep the socket short
        uds=Path(f"/tmp/rl-{os.getpid()}-{time.monotonic_ns() % 10**9}.sock") if uds else None,
        token=token,
        extra_args=extra_args,
        env=dict(env or {}),
    )
    return svc.start()


@contextlib.contextmanager
def running_service(tmp_path: Path, **kw: Any) -> Iterator[RunningService]:
    svc = start_service(tmp_path, **kw)
    try:
        yield svc
    finally:
        svc.stop()
        if svc.uds is not None:
            with contextlib.suppress(OSError):
                svc.uds.unlink()


def hold_analyses(hold_dir: Path, job_id: str) -> Path:
    """Hold every analysis of `job_id` in a service started with
    `env={"RELAUNCH_TEST_ANALYSIS_HOLD": str(hold_dir)}` (attribution/service/hold.py)
    until `release_analyses`; no sleeping, no timing."""
    hold_dir.mkdir(parents=True, exist_ok=True)
    fifo = hold_dir / job_id
    os.mkfifo(fifo)
    return fifo


def release_analyses(hold_dir: Path, job_id: str) -> None:
    """Let the held analysis of `job_id` go on. Waits until an analysis has reached the
    hold (opening a FIFO for writing blocks until a reader has it open), then removes the
    hold so later analyses of the job are not held."""
    fifo = hold_dir / job_id
    fd = os.open(fifo, os.O_WRONLY)
    fifo.unlink()
    os.close(fd)
