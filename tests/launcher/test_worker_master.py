"""torchrun's worker environment: with --master-addr/--master-port the workers see exactly
those as MASTER_ADDR/MASTER_PORT (issue 25, item 6), and torch.distributed (gloo) works on
them across a restart (the dead cycle's keys are gone); without them the per-round store
keeps its own port."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from tests._launcher_helpers import job_args, read_log, run_relaunch

WORKER = """\
import os, sys
import torch
import torch.distributed as dist
cycle = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"env MASTER_ADDR={os.environ['MASTER_ADDR']} MASTER_PORT={os.environ['MASTER_PORT']}",
      flush=True)
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print(f"allreduce={int(t.item())} cycle={cycle}", flush=True)
dist.destroy_process_group()
if cycle == 0 and int(os.environ["RANK"]) == 1:
    sys.exit(1)  # one restart: the next cycle must work on the same port
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(tmp_path: Path) -> str:
    path = tmp_path / "w.py"
    path.write_text(WORKER)
    return str(path)


def test_workers_see_the_given_master_port_across_a_restart(tmp_path: Path) -> None:
    port = _free_port()
    args = job_args(tmp_path, "mp", "--ft-attribution-endpoint", "off", "--max-restarts", "1")
    argv = [*args, "--master-addr", "127.0.0.1", "--master-port", str(port), _worker(tmp_path)]
    r = run_relaunch(tmp_path, argv)
    assert r.returncode == 0, r.stderr[-3000:]
    for cycle in (0, 1):
        log = read_log(tmp_path, "mp", cycle)
        seen = set(re.findall(r"env MASTER_ADDR=(\S+) MASTER_PORT=(\d+)", log))
        assert seen == {("127.0.0.1", str(port))}, log[-2000:]
        assert f"allreduce=2 cycle={cycle}" in log


def test_without_master_port_the_round_store_keeps_its_own(tmp_path: Path) -> None:
    args = job_args(tmp_path, "own", "--ft-attribution-endpoint", "off", "--max-restarts", "1")
    r = run_relaunch(tmp_path, [*args, _worker(tmp_path)])
    assert r.returncode == 0, r.stderr[-3000:]
    ports = set(re.findall(r"MASTER_PORT=(\d+)", read_log(tmp_path, "own", 0)))
    assert len(ports) == 1 and "29500" not in ports  # the kernel's choice, not a fixed one
