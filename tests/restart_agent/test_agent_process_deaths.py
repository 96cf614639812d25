"""Process deaths reported by a launcher that is not torch elastic (issue 18): the parent of
torch.multiprocessing.spawn (`rank_source: "spawn"`, the process index = the local rank,
named only on a single node), MPICH's mpiexec (hydra / mpd: `rank_source: "mpich"`), a
wrapped Open MPI summary, and Ray's actor deaths (the worker exit type decides whose fault
it is). Each through the real scanner and policy; shapes from public issue threads."""

from __future__ import annotations

import pytest

from relaunch.restart_agent import decide
from tests._agent_helpers import run_job, scan_text

TB = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 140, in <module>\n'
    "    mp.spawn(main_worker, nprocs=4, args=(opts,))\n"
)
CHILD_TB = (
    "-- Process 2 terminated with the following error:\n"
    "Traceback (most recent call last):\n"
    '  File "/home/u/proj/train.py", line 88, in main_worker\n'
    "    x = batch['input_ids']\n"
    "KeyError: 'input_ids'\n"
)


@pytest.mark.parametrize(
    "line",
    [
        "torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with signal SIGKILL",
        "Exception: process 3 terminated with signal SIGKILL",
    ],
)
def test_spawn_sigkill_is_a_root_on_the_spawn_index(line: str) -> None:
    verdicts = run_job([TB + line + "\n"] * 2)
    for v in verdicts:
        assert v.decision == "RESTART"  # type: ignore[attr-defined]
        p = v.primary  # type: ignore[attr-defined]
        assert (p.failure_class, p.role, p.rank, p.rank_source) == (
            "killed_sigkill",
            "root",
            3,
            "spawn",
        )
        assert "process index" in v.basis  # type: ignore[attr-defined]


@pytest.mark.parametrize("end", ["signal SIGABRT", "exit code 1"])
def test_spawn_abort_or_exit_code_is_a_cascade_that_names_the_process(end: str) -> None:
    v = decide(scan_text(TB + f"ProcessExitedException: process 1 terminated with {end}\n"))
    assert v.decision == "RESTART"
    assert (v.primary.role, v.primary.rank, v.primary.rank_source) == ("cascade", 1, "spawn")
    assert "reporter" not in v.basis


def test_the_childs_own_error_stays_the_root_and_gets_the_spawn_index() -> None:
    text = CHILD_TB + TB + "ProcessExitedException: process 2 terminated with exit code 1\n"
    v1, v2 = run_job([text, text])
    assert v1.primary.failure_class == "python_key_error"  # type: ignore[attr-defined]
    assert (v1.primary.rank, v1.primary.rank_source) == (2, "spawn")  # type: ignore[attr-defined]
    assert v2.decision == "STOP"  # type: ignore[attr-defined]  # identical workload bug twice


def test_spawn_index_is_no_global_rank_on_a_multi_node_job() -> None:
    ranks = "".join(f"[rank{r}]: step 1 loss 2.0\n" for r in range(16))
    v = decide(scan_text(ranks + TB + "Exception: process 3 terminated with signal SIGKILL\n"))
    assert v.decision == "RESTART" and v.primary.failure_class == "killed_sigkill"
    assert v.primary.rank is None and v.primary.rank_source is None


def test_spawn_index_is_no_global_rank_on_a_later_nodes_log() -> None:
    """A second node's log shows only its own ranks (8..11): few of them, but not 0..7, so
    its process index 3 is global rank 11, not 3 (found in review: counting the ranks seen
    took it for a single node)."""
    ranks = "".join(f"[rank{r}]: step 100 loss 0.5\n" for r in range(8, 12))
    v = decide(scan_text(ranks + TB + "Exception: process 3 terminated with signal SIGKILL\n"))
    assert v.decision == "RESTART" and v.primary.failure_class == "killed_sigkill"
    assert v.primary.rank is None and v.primary.rank_source is None


@pytest.mark.parametrize(
    ("signal", "cls", "role"),
    # a SIGABRT is a cascade like the 'caused collective abort' line: the earlier one leads
    [
        ("9", "killed_sigkill", "root"),
        ("11", "segfault", "root"),
        ("6", "mpi_process_exit", "cascade"),
    ],
)
def test_mpich_exit_status_names_the_rank(signal: str, cls: str, role: str) -> None:
    text = (
        "rank 27 in job 1958  bb36_58821   caused collective abort of all ranks\n"
        f"  exit status of rank 27: killed by signal {signal} \n"
    )
    v = decide(scan_text(text))
    assert v.decision == "RESTART"
    assert (v.primary.failure_class, v.primary.role) == (cls, role)
    assert (v.primary.rank, v.primary.rank_source) == (27, "mpich")
    assert "MPICH" in v.basis


def test_hydra_rank_died_from_signal() -> None:
    text = (
        "x42.hsn.example.org: rank 27421 died from signal 6\n"
        "x44.hsn.example.org: rank 48109 died from signal 15\n"
    )
    ev = scan_text(text)
    assert ev.first_teardown_line == 2  # the SIGTERM is the teardown
    v = decide(ev)
    assert v.decision == "RESTART"
    assert (v.primary.failure_class, v.primary.rank, v.primary.rank_source) == (
        "abort",
        27421,
        "mpich",
    )


def test_hydra_bad_termination_box_ties_the_signal_to_the_rank() -> None:
    box = (
        "=" * 83 + "\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
        "=   RANK {r} PID 12{r} RUNNING AT node0009\n=   KILLED BY SIGNAL: 9 (Killed)\n"
        + "=" * 83
        + "\n"
    )
    v = decide(scan_text(box.format(r=6)))
    assert (v.primary.failure_class, v.primary.role) == ("killed_sigkill", "root")
    assert (v.primary.rank, v.primary.rank_source) == (6, "mpich")
    # several killed processes: no single culprit
    v = decide(scan_text(box.format(r=6) + box.format(r=7)))
    assert v.decision == "RESTART" and v.primary.rank is None


def test_wrapped_open_mpi_summary_names_the_rank() -> None:
    text = (
        "mpiexec noticed that process rank 5 with PID 10313 on node proton exited on \n"
        "signal 6 (Aborted).\n"
    )
    v = decide(scan_text(text))
    assert v.decision == "RESTART"
    assert (v.primary.rank, v.primary.rank_source) == (5, "mpirun")


RAY = (
    "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
    "\tclass_name: WorkerDict\n\tpid: 61251\n"
    "The actor is dead because its worker process has died. Worker exit type: {kind} "
    "Worker exit detail: {detail}\n"
)


def test_ray_actor_death_by_system_error_restarts_on_recurrence() -> None:
    text = RAY.format(
        kind="SYSTEM_ERROR",
        detail="Worker unexpectedly exits with a connection error code 2. End of file. (1) "
        "The process is killed by SIGKILL by OOM killer due to high memory usage.",
    )
    for v in run_job([text] * 3):
        assert v.decision == "RESTART"  # type: ignore[attr-defined]
        assert v.primary.failure_class == "worker_process_died"  # type: ignore[attr-defined]


def test_ray_actor_death_by_the_users_exception_stays_workload() -> None:
    text = RAY.format(kind="USER_ERROR", detail="Exception raised from an actor init method.")
    v1, v2 = run_job([text, text])
    assert v1.decision == "RESTART" and v2.decision == "STOP"  # type: ignore[attr-defined]
    assert v1.primary.domain == "workload"  # type: ignore[attr-defined]
    # a RayTaskError traceback with the user's exception, no exit type: that exception
    tb = (
        "ray.exceptions.RayTaskError(ValueError): ray::Trainer.fit()\n"
        "ValueError: too many values to unpack (expected 2)\n"
    )
    v1, v2 = run_job([tb, tb])
    assert v1.primary.failure_class == "python_value_error"  # type: ignore[attr-defined]
    assert v2.decision == "STOP"  # type: ignore[attr-defined]
