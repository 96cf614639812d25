"""`relaunch run` speaks torchrun: console output (`--tee`, `--redirects`,
`--local-ranks-filter`), torchrun's and NVRx's spellings, one-line usage errors, YAML
precedence and the verdict thresholds, each through a real `relaunch run` process."""

from __future__ import annotations

import json
import re
import socket
import textwrap
from pathlib import Path

import pytest

from tests._launcher_helpers import engine_available, job_args, read_log, run_relaunch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

OFF = ("--ft-attribution-endpoint", "off")
LOG_LINE = re.compile(r"^(\[rank\d+\]: |\[relaunch\] )")

TALKER = """\
import os, sys
rank = os.environ["RANK"]
print(f"out from {rank} role={os.environ['ROLE_NAME']}", flush=True)
print(f"master_addr={os.environ['MASTER_ADDR']}", flush=True)
print(f"err from {rank}", file=sys.stderr, flush=True)
print(f"[rank{rank}]: torch-prefixed from {rank}", file=sys.stderr, flush=True)
"""


def _talker(tmp_path: Path) -> str:
    path = tmp_path / "talker.py"
    path.write_text(TALKER)
    return str(path)


def _run(tmp_path: Path, job: str, *args: str, timeout: float = 120):
    return run_relaunch(tmp_path, job_args(tmp_path, job, *OFF, *args), timeout=timeout)


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_tee_shows_every_rank_with_torch_prefix_and_cycle_log_uses_it(tmp_path: Path) -> None:
    r = _run(tmp_path, "tee", "--tee", "3", _talker(tmp_path))
    assert r.returncode == 0, r.stderr
    out, err = _lines(r.stdout), _lines(r.stderr)
    for rank in (0, 1):
        assert f"[rank{rank}]: out from {rank} role=default" in out
        assert f"[rank{rank}]: err from {rank}" in err
        # torch's own `[rankN]: ` (its excepthook's) is not printed twice
        assert f"[rank{rank}]: torch-prefixed from {rank}" in err
    log = read_log(tmp_path, "tee", 0)
    for n, line in enumerate(log.splitlines(), 1):
        assert LOG_LINE.match(line), f"line {n}: {line!r}"
    assert "[rank1]: out from 1 role=default" in log
    assert "[rank0]: torch-prefixed from 0" in log
    # where the cycle's log is
    path = tmp_path / "logs" / "tee" / "cycle_0.log"
    assert f"relaunch: cycle 0 log: {path.resolve()}" in err


def test_default_console_shows_worker_output_as_written(tmp_path: Path) -> None:
    r = _run(tmp_path, "raw", _talker(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "out from 0 role=default" in _lines(r.stdout)
    assert "out from 1 role=default" in _lines(r.stdout)
    assert "err from 1" in _lines(r.stderr)
    assert "[rank1]: torch-prefixed from 1" in _lines(r.stderr)


def test_redirects_keep_streams_in_the_cycle_log_only(tmp_path: Path) -> None:
    # all streams redirected; local rank 1's stderr teed (tee implies redirect, as in torchrun)
    r = _run(tmp_path, "redir", "--redirects", "3", "--tee", "1:2", _talker(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "from" not in r.stdout
    assert "[rank1]: err from 1" in _lines(r.stderr)
    assert "err from 0" not in r.stderr
    log = read_log(tmp_path, "redir", 0)
    for rank in (0, 1):
        assert f"[rank{rank}]: out from {rank} role=default" in log
        assert f"[rank{rank}]: err from {rank}" in log


def test_local_ranks_filter_shows_only_rank_0(tmp_path: Path) -> None:
    r = _run(tmp_path, "filter", "--tee", "3", "--local_ranks_filter", "0", _talker(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "[rank0]: out from 0 role=default" in _lines(r.stdout)
    assert "from 1" not in r.stdout + r.stderr
    log = read_log(tmp_path, "filter", 0)  # the cycle log keeps every rank
    assert "[rank1]: out from 1 role=default" in log
    assert "[rank1]: err from 1" in log


def test_role_is_shown_as_torchrun_shows_it(tmp_path: Path) -> None:
    r = _run(
        tmp_path,
        "role",
        "--role",
        "trainer",
        "--tee",
        "1",
        "--local-addr",
        "127.0.0.1",
        _talker(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    # torchrun's tee header `[{role}{local_rank}]:`, the line as written; ROLE_NAME set
    assert "[trainer1]:out from 1 role=trainer" in _lines(r.stdout)
    log = read_log(tmp_path, "role", 0)
    assert "[rank1]: out from 1 role=trainer" in log
    # --local-addr is this node's address in the rendezvous: the workers' MASTER_ADDR
    assert "[rank0]: master_addr=127.0.0.1" in log


def test_log_line_prefix_template(tmp_path: Path) -> None:
    template = "<${role_name} ${rank}/${local_rank}> "
    r = _run(
        tmp_path, "tpl", "--tee", "1", "--log-line-prefix-template", template, _talker(tmp_path)
    )
    assert r.returncode == 0, r.stderr
    assert "<default 1/1> out from 1 role=default" in _lines(r.stdout)


def test_module_flag_runs_a_module(tmp_path: Path) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(
        "import os, sys\nprint(f'module {__name__} rank {os.environ[\"RANK\"]} args {sys.argv[1:]}')\n"
    )
    r = _run(tmp_path, "mod", "-m", "mypkg.train", "--lr", "3")
    assert r.returncode == 0, r.stderr
    log = read_log(tmp_path, "mod", 0)
    assert "[rank1]: module __main__ rank 1 args ['--lr', '3']" in log


def test_no_python_runs_an_executable(tmp_path: Path) -> None:
    exe = tmp_path / "train.sh"
    exe.write_text('#!/bin/sh\necho "shell rank=$RANK world=$WORLD_SIZE args=$*"\n')
    exe.chmod(0o755)
    r = _run(tmp_path, "exe", "--no_python", str(exe), "a", "b")
    assert r.returncode == 0, r.stderr
    assert "[rank0]: shell rank=0 world=2 args=a b" in read_log(tmp_path, "exe", 0)
    # a missing executable is a usage error before anything starts
    r = _run(tmp_path, "exe2", "--no-python", "no-such-trainer-binary")
    assert r.returncode == 2
    assert _lines(r.stderr) == [
        "relaunch run: error: executable not found on PATH: no-such-trainer-binary"
    ]


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_run_path_runs_the_script_in_the_worker_interpreter(tmp_path: Path, method: str) -> None:
    script = tmp_path / "rp.py"
    script.write_text(
        "import os, sys\n"
        "print('run_path', os.environ['RANK'], sys.argv[1:], flush=True)\n"
        # a forked worker inherits the launcher's modules; a spawned one starts afresh
        "print('inherited', 'relaunch.launcher.agent' in sys.modules, flush=True)\n"
    )
    r = _run(tmp_path, "rp", "--start_method", method, "--run-path", str(script), "x")
    assert r.returncode == 0, r.stderr
    log = read_log(tmp_path, "rp", 0)
    assert "[rank1]: run_path 1 ['x']" in log
    assert f"[rank1]: inherited {method == 'fork'}" in log


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STORE_PROBE = """\
import os, sys
from datetime import timedelta
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=timedelta(seconds=60))
print(f"rendezvous store at port {sys.argv[1]} has {store.num_keys()} keys", flush=True)
"""


@pytest.mark.parametrize(
    "flags",
    [
        ("--standalone", "--master-port"),
        ("--nnodes", "1", "--master_addr", "127.0.0.1", "--master_port"),
    ],
    ids=["standalone", "underscore-forms"],
)
def test_master_port_is_the_rendezvous_port(tmp_path: Path, flags: tuple[str, ...]) -> None:
    port = _free_port()
    probe = tmp_path / "probe.py"
    probe.write_text(STORE_PROBE)
    r = _run(tmp_path, "mp", *flags, str(port), str(probe), str(port))
    assert r.returncode == 0, r.stderr
    log = read_log(tmp_path, "mp", 0)
    assert re.search(rf"^\[rank0\]: rendezvous store at port {port} has [1-9]\d* keys$", log, re.M)


def test_unknown_flag_is_one_line_with_the_closest_flag(tmp_path: Path) -> None:
    r = _run(tmp_path, "u", "--nproc-per-nodes", "2", _talker(tmp_path))
    assert r.returncode == 2
    assert _lines(r.stderr) == [
        "relaunch run: error: unknown option --nproc-per-nodes (did you mean --nproc-per-node?)"
    ]
    r = _run(tmp_path, "u", "--tee", "5", _talker(tmp_path))
    assert r.returncode == 2
    assert _lines(r.stderr) == [
        "relaunch run: error: --tee: '5': expected 0-3 or LOCAL_RANK:0-3,... (e.g. 3 or 0:1,1:2)"
    ]
    assert not (tmp_path / "logs" / "u").exists() or not list((tmp_path / "logs" / "u").iterdir())


def test_nvrx_rdzv_impl_and_restart_policy(tmp_path: Path) -> None:
    r = _run(tmp_path, "legacy", "--ft-rdzv-impl", "legacy", _talker(tmp_path))
    assert r.returncode == 2
    assert _lines(r.stderr) == [
        "relaunch run: error: --ft-rdzv-impl: 'legacy': the legacy rendezvous implementation "
        "was removed; barrier is the only implementation"
    ]
    r = _run(
        tmp_path,
        "barrier",
        "--ft-rdzv_impl",
        "barrier",
        "--ft-restart-policy",
        "any-failed",
        _talker(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert (
        "relaunch run: warning: --ft-restart-policy is deprecated (as in NVRx): "
        "any-failed is the only policy" in _lines(r.stderr)
    )


def test_yaml_values_apply_and_the_command_line_wins(tmp_path: Path) -> None:
    cfg = tmp_path / "ft.yaml"
    cfg.write_text(
        textwrap.dedent(
            """\
            fault_tolerance:
              tee: 3
              local_ranks_filter: 1
              rank_heartbeat_timeout: 120
              rdzv_impl: barrier
              workload_check_interval: 5.0
              ranks_filter: 0
            """
        )
    )
    # YAML tees both streams of local rank 1; the command line narrows tee to stdout
    r = _run(tmp_path, "yaml", "--ft-cfg-path", str(cfg), "--tee", "1", _talker(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "[rank1]: out from 1 role=default" in _lines(r.stdout)
    assert "err from 1" in _lines(r.stderr)  # not teed any more: as written
    assert "from 0" not in r.stdout + r.stderr  # the YAML filter still applies
    warnings = [ln for ln in _lines(r.stderr) if ln.startswith("relaunch run: warning:")]
    assert len(warnings) == 2, warnings
    assert "'workload_check_interval' ignored" in warnings[0]
    assert "unknown option 'ranks_filter' ignored" in warnings[1]
    assert "did you mean" in warnings[1]
    cfg.write_text("fault_tolerance:\n  tee: 9\n")
    r = _run(tmp_path, "yaml-bad", "--ft-cfg-path", str(cfg), _talker(tmp_path))
    assert r.returncode == 2 and len(_lines(r.stderr)) == 1
    assert "tee: 9: expected 0-3" in r.stderr


SAME_FAILURE = """\
import os, sys, time
from relaunch.launcher.client import report_progress
rank = int(os.environ["RANK"])
report_progress(iteration=50)  # the same iteration every cycle: no progress
time.sleep(0.2)
if rank == 1:
    print("RuntimeError: CUDA error: unspecified launch failure", file=sys.stderr, flush=True)
    sys.exit(1)
time.sleep(30)
"""


def test_policy_flags_reach_the_verdict(tmp_path: Path) -> None:
    reason = engine_available()
    if reason:
        pytest.skip(reason)
    script = tmp_path / "same.py"
    script.write_text(SAME_FAILURE)
    r = run_relaunch(
        tmp_path,
        job_args(
            tmp_path,
            "policy",
            "--max-restarts",
            "6",
            "--ft-attribution-stop-action",
            "no-restart",
            "--ft-same-root-retries",
            "1",
            "--ft-max-no-progress-restarts",
            "9",
            "--ft-workload-recurrence-stop",
            "2",
            str(script),
        ),
        timeout=170,
    )
    assert r.returncode == 3, r.stderr  # STOP by verdict
    verdicts = {}
    for path in (tmp_path / "logs" / "audit").rglob("*.json"):
        data = json.loads(path.read_text())
        v = data.get("verdict", data)
        if isinstance(v, dict) and "budgets" in v:
            verdicts[int(data.get("cycle", v.get("cycle", -1)))] = v
    stops = sorted(c for c, v in verdicts.items() if v["decision"] == "STOP")
    assert stops, verdicts
    # default same-root ceiling (3) would stop at cycle 3; the flag's 1 stops at cycle 1
    assert stops[0] == 1, {c: (v["decision"], v["rule"]) for c, v in verdicts.items()}
    budgets = verdicts[1]["budgets"]
    assert budgets["same_root_no_progress_retries"] == 1
    assert budgets["job_no_progress_ceiling"] == 9
    assert budgets["workload_recurrence_stop"] == 2
    assert verdicts[1]["rule"] == "stop.same_root_ceiling"
