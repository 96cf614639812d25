"""Hard cases of the verdict, one group per case (`test_fN_*`, the numbering of the review
that found them: FINDINGS 1-10): secondary counters and epoch bars vs training progress,
Slurm step teardown, environment failures at startup, unknown progress formats, blame of a
silent rank over cascades, never staying unknown forever, third-party imports, absurd
numbers, huge worlds, checkpoint-load and empty-log edges. Each is a failing-first test: through `decide`/`scan` (`run_job` stores every verdict as JSON and
reads it back, as the service does) and, for multi-cycle histories, through the real
`relaunch analyze --db` CLI against a SQLite file."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from relaunch.restart_agent import decide
from tests._agent_helpers import fact, run_job, scan_text
from tests._cli_helpers import run_analyze
from tests._storage_helpers import sqlite_url

NCCL = (
    "[rank3]: RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269,"
    " unhandled system error, NCCL version 2.18.1\n"
)
KEYERR = (
    "[rank2]: Traceback (most recent call last):\n"
    '[rank2]:   File "/app/train.py", line 88, in <module>\n'
    "[rank2]: KeyError: 'labels'\n"
)


def meg(it: int, total: int = 100000) -> str:
    return (
        f"[rank0]: iteration {it:8d}/{total:8d} | consumed samples: {it * 512:12d} | "
        "elapsed time per iteration (ms): 812.3 | lm loss: 2.345E+00 |\n"
    )


def wd(rank: int, seq: int = 4242) -> str:
    return (
        f"[rank{rank}]:[E ProcessGroupNCCL.cpp:563] [Rank {rank}] Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600117 milliseconds before timing out.\n"
    )


def cli_job(tmp_path: Path, job: str, logs: list[str | bytes]) -> list[dict]:
    """Every cycle of `job` through `relaunch analyze --db` (one SQLite history)."""
    db = sqlite_url(tmp_path)
    out = []
    for n, text in enumerate(logs):
        path = tmp_path / f"{job}.cycle_{n}.log"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        p = run_analyze(path, "--db", db, "--job-id", job, "--cycle", str(n), "--format", "json")
        assert p.returncode == 0, p.stderr
        out.append(json.loads(p.stdout))
    return out


def decisions(vs: list) -> str:
    return "".join((v["decision"] if isinstance(v, dict) else v.decision)[0] for v in vs)


# ----------------------------------------------------------------- 1: secondary counters
def hf(it: int) -> str:
    return (
        f"[rank0]: {it * 100 // 2000:3d}%|███       | {it}/2000 [1:00:00<2:00:00,  1.2it/s]\n"
        "[rank0]: {'loss': 2.31, 'grad_norm': 1.1, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
        "[rank0]: 100%|██████████| 63/63 [00:10<00:00,  6.1it/s]\n"
        "[rank0]: {'eval_loss': 2.2, 'eval_runtime': 10.3, 'epoch': 0.5}\n"
    )


def test_f1_finished_eval_bar_does_not_hide_training_progress(tmp_path: Path) -> None:
    vs = cli_job(tmp_path, "hf", [hf(300 * (k + 1)) + NCCL for k in range(6)])
    assert decisions(vs) == "RRRRRR"
    assert [v["progress"]["last_iteration"] for v in vs] == [300, 600, 900, 1200, 1500, 1800]
    assert [v["rule"] for v in vs[1:]] == ["restart.progress"] * 5


def test_f1_probable_workload_bug_with_training_progress_restarts() -> None:
    vs = run_job([hf(300) + KEYERR, hf(600) + KEYERR, hf(900) + KEYERR])
    assert decisions(vs) == "RRR"


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("Loading checkpoint shards: 100%|██████████| 4/4 [00:05<00:00,  1.3s/it]", None),
        ("Validation DataLoader 0: 100%|██████████| 63/63 [00:10<00:00,  6.1it/s]", None),
        ("Evaluating:  40%|████      | 25/63 [00:10<00:15,  2.5it/s]", None),
        (" successfully loaded checkpoint from /ckpt/gpt at iteration 5000", None),
        ("srun: Terminating job step 81234.0", None),
        (
            "[Epoch 0 / Train]:   1%|▌         | 1200/2839 [15:02<33:39:30, 42.97s/it, loss=2.58]",
            1200,
        ),
    ],
)
def test_f1_secondary_counters_are_not_progress(line: str, want: int | None) -> None:
    p = scan_text(f"[rank0]: {line}\n").progress
    assert p.last_iteration == want


def test_f1_hf_epoch_fraction_is_progress_when_no_step_is_logged() -> None:
    def hf2(ep: int) -> str:
        return (
            "[rank0]: Loading checkpoint shards: 100%|██████████| 4/4 [00:05<00:00,  1.3s/it]\n"
            + "".join(
                f"[rank0]: {{'loss': 2.{i}, 'learning_rate': 1e-05, 'epoch': {ep + i / 10:.2f}}}\n"
                for i in range(5)
            )
        )

    vs = run_job([hf2(k) + NCCL for k in range(6)])
    assert decisions(vs) == "RRRRRR"
    assert vs[5].progress.dialect == "hf_trainer_epoch" and vs[5].progress.last_iteration == 5400


def test_f1_validation_bar_after_lightning_epoch_bar_keeps_the_epoch_step() -> None:
    text = (
        "Epoch 3:  45%|████▌     | 450/1000 [01:23<01:40,  5.47it/s, v_num=0]\n"
        "Validation DataLoader 0: 100%|██████████| 63/63 [00:10<00:00,  6.1it/s]\n"
    )
    assert scan_text(text).progress.last_iteration == 3 * 1000 + 450


def test_f1_slurm_step_id_does_not_mask_megatron_progress(tmp_path: Path) -> None:
    srun = "srun: error: gpu-node-12: task 5: Exited with exit code 1\nsrun: Terminating job step 81234.0\n"
    vs = cli_job(tmp_path, "stepid", [meg(1000 * (k + 1)) + NCCL + srun for k in range(5)])
    assert decisions(vs) == "RRRRR"
    assert vs[-1]["progress"]["last_iteration"] == 5000


def test_f1_colossalai_epoch_bar_reads_the_step(tmp_path: Path) -> None:
    def bar(step: int) -> str:
        return (
            f"[Epoch 0 / Train]:   1%|▌         | {step}/2839 [15:02<33:39:30, 42.97s/it, "
            "loss=2.58, lr=0.0167]\n"
        )

    ex = "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 7 (pid: 2860777) of binary: /usr/bin/python\n"
    vs = cli_job(tmp_path, "colossal", [bar(100 * (k + 1)) + ex for k in range(5)])
    assert decisions(vs) == "RRRRR"
    assert vs[-1]["progress"]["last_iteration"] == 500


# ----------------------------------------------------------------- 2: Slurm step teardown
def test_f2_bare_step_cancel_after_a_task_failed_is_teardown(tmp_path: Path) -> None:
    text = (
        "srun: error: gpu-node-12: task 5: Exited with exit code 1\n"
        "srun: Terminating job step 81234.0\n"
        "slurmstepd: error: *** STEP 81234.0 ON gpu-node-01 CANCELLED AT 2026-12-01T10:00:00 ***\n"
    )
    vs = cli_job(tmp_path, "kobe", [meg(1000) + wd(1) + text, meg(1000) + wd(1) + text])
    assert decisions(vs) == "RR"
    assert all(v["rule"] != "stop.scheduler_terminated" for v in vs)
    job = "slurmstepd: error: *** JOB 81234 ON gpu-node-01 CANCELLED AT 2026-12-01T10:00:00 ***\n"
    assert decide(scan_text(meg(1000) + job)).rule == "stop.scheduler_terminated"


# ----------------------------------------------------------------- 3: infrastructure at startup
INFRA_STARTUP = [
    "RuntimeError: Timed out initializing process group in store based barrier on rank: 4330, for key: store_based_barrier_key:522 (world_size=2048, worker_count=1792, timeout=0:30:00)",
    "RuntimeError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
    "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 802: system not yet initialized",
    "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub and we cannot find the requested files in the local cache.",
    "RuntimeError: No CUDA GPUs are available",
    "huggingface_hub.errors.HfHubHTTPError: 503 Server Error: Service Unavailable for url: https://huggingface.co/api/models/gpt2",
    "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
    "RuntimeError: CUDA driver error: unknown error",
]


@pytest.mark.parametrize("line", INFRA_STARTUP)
def test_f3_environment_failures_at_startup_restart(line: str) -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/app/train.py", line 12, in <module>\n'
        f"{line}\n"
    )
    vs = run_job([text, text])
    assert decisions(vs) == "RR", [v.rule for v in vs]
    assert vs[0].primary.domain == "infrastructure"


# ----------------------------------------------------------------- 4: unknown progress format
def nano(it: int) -> str:
    return "".join(
        f"[rank0]: iter {i}: loss 2.3456, time 123.45ms, mfu 40.00%\n" for i in range(it - 3, it)
    )


def test_f4_nanogpt_iter_lines_are_progress(tmp_path: Path) -> None:
    vs = cli_job(tmp_path, "nano", [nano(1000 * (k + 1)) + wd(1) + wd(2) for k in range(6)])
    assert decisions(vs) == "RRRRRR"
    assert vs[-1]["progress"]["dialect"] == "plain_iter"


def test_f4_a_high_collective_seqnum_means_the_job_ran_past_startup() -> None:
    cde = "[rank4]: RuntimeError: CUDA driver error: unknown error\n"
    vs = run_job([wd(1) + wd(2)] * 7 + [wd(1) + cde])
    assert decisions(vs) == "R" * 8
    assert vs[1].history.progress_basis == "ran_past_startup"
    assert not vs[1].history.failed_before_first_iteration
    # a low sequence number (the first barriers) is no such proof
    assert run_job([wd(1, seq=3)] * 2)[1].history.progress_basis == "no_progress_ever"


# ----------------------------------------------------------------- 5: blame
def test_f5_silent_rank_wins_over_the_watchdogs_abort_seen_by_the_launcher() -> None:
    text = (
        "".join(wd(r) for r in range(7))
        + fact("cycle_start", job="j", node=0, ranks=list(range(8)), world_size=8, t=1.0)
        + fact(
            "rank_exit",
            rank=5,
            local_rank=5,
            node=0,
            exitcode=-6,
            signal="SIGABRT",
            first=True,
            t_s=700.0,
        )
    )
    v = decide(scan_text(text))
    assert (v.primary.rank, v.primary.rank_source) == (7, "silent_rank")


def test_f5_silent_rank_wins_over_elastic_root_cause_of_an_abort() -> None:
    rc = (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2024-01-01_10:00:00\n"
        "  host      : node1\n  rank      : 2 (local_rank: 2)\n  exitcode  : -6 (pid: 4444)\n"
        "  error_file: <N/A>\n  traceback : Signal 6 (SIGABRT) received by PID 4444\n"
    )
    # rank 7 printed (so the world has 8 ranks) but did not time out
    v = decide(scan_text("[rank7]: building the model\n" + "".join(wd(r) for r in range(7)) + rc))
    assert (v.primary.rank, v.primary.rank_source) == (7, "silent_rank")


def test_f5_a_rank_that_never_printed_is_the_gap() -> None:
    ee = "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 777) of binary: /usr/bin/python\n"
    v = decide(scan_text("".join(wd(r) for r in range(16) if r != 11) + ee))
    assert (v.primary.rank, v.primary.rank_source) == (11, "silent_rank")


def test_f5_a_cascade_reporter_is_not_blamed(tmp_path: Path) -> None:
    text = wd(3, seq=33) + wd(0, seq=257)
    v = cli_job(tmp_path, "reporter", [text])[0]
    assert v["primary"]["role"] == "cascade"
    assert v["primary"]["rank_source"] == "cascade_reporter"
    assert v["fan_out"]["rank_source"] == "cascade_reporter"
    assert "not the culprit" in v["basis"] and "Blamed rank" not in v["basis"]


# ----------------------------------------------------------------- 6: unknown forever
SIZE_MISMATCH = (
    "[rank0]: Traceback (most recent call last):\n"
    '[rank0]:   File "/app/train.py", line 120, in <module>\n'
    "[rank0]:     model.load_state_dict(sd)\n"
    "[rank0]: RuntimeError: Error(s) in loading state_dict for GPT:\n"
    "[rank0]: \tsize mismatch for embed.weight: copying a param with shape torch.Size([50304, 4096]) "
    "from checkpoint, the shape in current model is torch.Size([50257, 4096]).\n"
)


def test_f6_slow_startup_workload_bug_stops_at_the_job_ceiling(tmp_path: Path) -> None:
    def cyc(k: int) -> str:
        return (
            SIZE_MISMATCH
            + fact(
                "rank_exit",
                cycle=k,
                rank=0,
                local_rank=0,
                node=0,
                exitcode=1,
                signal=None,
                first=True,
                t_s=900.0,
            )
            + fact("cycle_end", cycle=k, outcome="failed", duration_s=910.0)
        )

    vs = cli_job(tmp_path, "slowload", [cyc(k) for k in range(6)])
    assert decisions(vs) == "RRRRSS"
    assert vs[4]["rule"] == "stop.unknown_progress_recurrence"
    assert vs[4]["history"]["identical_cycles_progress_unknown"] == 5
    assert vs[4]["budgets"]["job_no_progress_ceiling"] == 5
    assert "job_no_progress_ceiling" in vs[4]["basis"]


def test_f6_initial_hang_is_a_startup_failure(tmp_path: Path) -> None:
    def ih(k: int) -> str:
        return fact(
            "hang", cycle=k, rank=3, silent_s=1800.0, section=None, initial=True, others=[0, 1, 2]
        ) + fact("cycle_end", cycle=k, outcome="failed", duration_s=1850.0)

    vs = cli_job(tmp_path, "inithang", [ih(k) for k in range(7)])
    assert decisions(vs) == "RRRRRSS"
    assert vs[1]["history"]["progress_basis"] == "initial_hang"
    assert vs[5]["rule"] == "stop.job_no_progress_ceiling"


def test_f6_corrupt_checkpoint_after_one_progressing_cycle_stops_eventually(tmp_path: Path) -> None:
    unpickle = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/app/train.py", line 60, in <module>\n'
        "[rank0]: _pickle.UnpicklingError: invalid load key, '\\x00'.\n"
    )
    vs = cli_job(tmp_path, "unpickle", [meg(1000) + NCCL] + [unpickle] * 6)
    assert decisions(vs) == "RRRRRSS"
    assert vs[5]["rule"] == "stop.unknown_progress_recurrence"
    assert vs[4]["history"]["progress_basis"] == "job_progressed_before"


def test_f6_infrastructure_root_with_unknown_progress_never_stops() -> None:
    end = fact("cycle_end", outcome="failed", duration_s=20000.0)
    assert decisions(run_job([NCCL + end] * 8)) == "R" * 8


# ----------------------------------------------------------------- 7: third-party imports
def _import_fail(ranks: range, frames: list[str], err: str) -> str:
    out = []
    for r in ranks:
        out.append(f"[rank{r}]: Traceback (most recent call last):\n")
        out += [f"[rank{r}]:   {f}\n" for f in frames]
        out.append(f"[rank{r}]: {err}\n")
    return "".join(out)


FLASH = _import_fail(
    range(4),
    [
        'File "/app/train.py", line 5, in <module>',
        'File "/usr/local/lib/python3.10/site-packages/flash_attn/__init__.py", line 3, in <module>',
    ],
    "ImportError: /usr/local/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
)
DEEPSPEED = _import_fail(
    range(4),
    ['File "/app/train.py", line 5, in <module>'],
    "ModuleNotFoundError: No module named 'deepspeed'",
)


@pytest.mark.parametrize("text", [FLASH, DEEPSPEED], ids=["flash_attn", "deepspeed"])
def test_f7_third_party_import_stops_on_recurrence_not_first_sight(
    tmp_path: Path, text: str
) -> None:
    vs = cli_job(tmp_path, "imp", [text, text])
    assert [v["rule"] for v in vs] == ["restart.workload_first", "stop.startup_recurrence"]


def test_f7_own_import_on_one_node_only_is_not_certain() -> None:
    text = _import_fail(
        range(4, 8),
        ['File "/app/mylib/train.py", line 5, in <module>'],
        "ModuleNotFoundError: No module named 'mylib.model'",
    )
    assert decide(scan_text(text)).rule == "restart.workload_first"
    everywhere = text.replace("[rank4]", "[rank0]").replace("[rank5]", "[rank1]")
    everywhere = everywhere.replace("[rank6]", "[rank2]").replace("[rank7]", "[rank3]")
    assert decide(scan_text(everywhere)).rule == "stop.user_import_error"


# ----------------------------------------------------------------- 8: absurd numbers
@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("[rank0]: step 9223372036854775808 loss 1", None),
        ("[rank0]: iteration 1" + "0" * 5000 + "/ 1 |", None),
        # epoch * total is out of bounds: the bar's own step is what is left
        ("Epoch 99999999999:  45%|████▌     | 450/99999999999 [01:23<01:40]", 450),
    ],
    ids=["int64", "5001_digits", "epoch_times_total"],
)
def test_f8_absurd_progress_numbers_are_no_progress(
    tmp_path: Path, line: str, want: int | None
) -> None:
    text = f"{line}\n[rank0]: ValueError: boom\n"
    vs = cli_job(tmp_path, "huge", [text, text])
    assert [v["progress"]["last_iteration"] for v in vs] == [want, want]


# ----------------------------------------------------------------- 9: huge world
def test_f9_huge_world_size_is_counted_not_enumerated() -> None:
    text = fact("cycle_start", job="j", node=0, ranks=[0], world_size=10_000_000, t=1.0) + wd(1)
    ev = scan_text(text)
    tracemalloc.start()
    v = decide(ev)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert v.decision == "RESTART"
    assert peak < 20 * 2**20, peak


# ----------------------------------------------------------------- 10: minor
def test_f10_state_dict_size_mismatch_is_a_checkpoint_load_failure() -> None:
    p = decide(scan_text(SIZE_MISMATCH)).primary
    assert (p.failure_class, p.domain) == ("checkpoint_load_failure", "workload")


def test_f10_empty_logs_reach_the_job_ceiling_without_a_primary() -> None:
    vs = run_job([""] * 6)
    assert decisions(vs) == "RRRRRS"
    assert vs[5].rule == "stop.job_no_progress_ceiling" and vs[5].primary is None
