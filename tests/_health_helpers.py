"""Test helpers for node health: a real external health service in its own process.

Run as a script, it serves `nvhcd.HealthCheckService` on a Unix socket and answers
according to MODE (healthy, failing, fail_count, output_fail_count, garbage, non_object,
slow, and fail_after_first: healthy on the first call, failing from the second on). `start_health_service()` starts it and waits until the socket answers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

MODES = (
    "healthy",
    "failing",
    "fail_count",
    "output_fail_count",
    "garbage",
    "non_object",
    "slow",
    "fail_after_first",
)


def _reply(mode: str, args: list[str]):  # type: ignore[no-untyped-def]
    from relaunch.launcher.health import node_health_pb2

    R = node_health_pb2.HealthCheckResponse
    echo = {"args": args, "checks": {"gpu": "ok", "ib": "ok"}}
    if mode == "healthy":
        return R(success=True, exit_code=0, output=json.dumps(echo), fail_count=0)
    if mode == "failing":
        return R(
            success=False,
            exit_code=1,
            output=json.dumps({"reason": "IB port down", "checks": {"ib": "fail"}}),
            error="ib check failed",
        )
    if mode == "fail_count":
        return R(success=True, exit_code=0, output=json.dumps(echo), fail_count=2)
    if mode == "output_fail_count":
        return R(success=True, exit_code=0, output=json.dumps({"fail_count": 3}))
    if mode == "garbage":
        return R(success=True, exit_code=0, output="\x00not json{{", fail_count=0)
    if mode == "non_object":
        return R(success=True, exit_code=0, output="[1, 2, 3]", fail_count=0)
    if mode == "slow":
        time.sleep(30)
        return R(success=False, fail_count=9)
    raise ValueError(mode)


def serve(socket_path: str, mode: str) -> None:
    import grpc

    from relaunch.launcher.health import node_health_pb2_grpc

    calls = [0]

    class Servicer(node_health_pb2_grpc.HealthCheckServiceServicer):
        def RunHealthCheck(self, request, context):  # type: ignore[no-untyped-def]
            calls[0] += 1
            if mode == "fail_after_first":
                return _reply("healthy" if calls[0] == 1 else "failing", list(request.args))
            return _reply(mode, list(request.args))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    node_health_pb2_grpc.add_HealthCheckServiceServicer_to_server(Servicer(), server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    print("READY", flush=True)
    server.wait_for_termination()


@contextmanager
def start_health_service(mode: str) -> Iterator[str]:
    """Run the service in a child process; yield its `unix:///...` endpoint."""
    tmp = tempfile.mkdtemp(prefix="rlh-")  # short path: AF_UNIX paths are limited to ~107 bytes
    sock = os.path.join(tmp, "nhc.sock")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), sock, mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "READY":
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"health service did not start: {line!r} {err}")
        yield f"unix://{sock}"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("socket")
    parser.add_argument("mode", choices=MODES)
    ns = parser.parse_args()
    serve(ns.socket, ns.mode)
