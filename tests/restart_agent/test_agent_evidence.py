"""Primary selection under interleaving and cascades, cascade folding, fingerprint
stability across ranks and cycles, and the realistic checked-in samples."""

from __future__ import annotations

import pytest

import relaunch.restart_agent as ra
from relaunch.restart_agent.fingerprint import fingerprint, normalize
from tests._agent_helpers import LOGS, make_logs, scan_text

ML = make_logs()


@pytest.mark.parametrize("prefix", ["rank", "default", "launcher", "srun", "mpi"])
def test_cuda_error_is_primary_and_nccl_timeouts_are_folded(prefix: str) -> None:
    ev = scan_text(
        ML.make_log(
            "cuda_nccl_cascade", ranks=32, lines=400, seed=3, prefix=prefix, failing_rank=17
        )
    )
    assert ev.primary.failure_class == "cuda_illegal_memory_access"
    assert ev.primary.rank == 17
    assert ev.primary.entity == "/work/train.py:170"
    groups = {g.failure_class: g for g in ev.cascades}
    wd = groups["nccl_watchdog_timeout"]
    assert wd.count == 31 and len(wd.ranks) == 31 and 17 not in wd.ranks
    assert groups["nccl_comm_aborted"].count == 31
    assert groups["sigterm_teardown"].role == "teardown"
    assert ev.ranks_seen == list(range(32))
    assert len(ev.failed_ranks) == 32


def test_earliest_root_wins_not_the_loudest() -> None:
    text = "[rank5]: RuntimeError: CUDA error: unspecified launch failure\n" + "".join(
        f"[rank{r}]: KeyError: 'x'\n" for r in range(8)
    )
    assert scan_text(text).primary.rank == 5


def test_roots_after_teardown_are_demoted() -> None:
    text = (
        "[rank2]: [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1) ran for 600000 milliseconds before timing out.\n"
        "W1202 torch.distributed.elastic.multiprocessing.api: Sending process 12 closing signal SIGTERM\n"
        # a root-capable line after teardown began (a bare "RuntimeError: Connection reset by
        # peer" is now a cascade of its own, so the late root is a ConnectionResetError)
        "[rank4]: ConnectionResetError: [Errno 104] Connection reset by peer\n"
    )
    ev = scan_text(text)
    assert ev.primary.failure_class == "nccl_watchdog_timeout"
    assert "teardown" in ev.primary_reason
    text2 = "[rank1]: KeyError: 'a'\n" + text
    assert scan_text(text2).primary.failure_class == "python_key_error"


def test_xid_on_the_kernel_log_precedes_the_cuda_error() -> None:
    ev = ra.scan_file(LOGS / "xid_8r_srun.log")
    assert ev.primary.failure_class == "gpu_fallen_off_bus"
    assert ev.primary.domain == "infrastructure"
    assert any(r.failure_class == "cuda_launch_failure" and r.rank == 2 for r in ev.roots)


@pytest.mark.parametrize(
    "scenario", ["cuda_nccl_cascade", "oom", "xid", "enospc", "nan", "key_error", "segfault"]
)
def test_fingerprint_is_stable_across_cycles_ranks_and_seeds(scenario: str) -> None:
    fps = set()
    for seed, rank in [(1, 0), (2, 5), (3, 7)]:
        ev = scan_text(
            ML.make_log(
                scenario,
                ranks=8,
                lines=100,
                seed=seed,
                failing_rank=rank,
                start_iteration=seed * 1000,
            )
        )
        fps.add(ev.primary.fingerprint)
    assert len(fps) == 1, fps


def test_fingerprints_differ_for_different_failures() -> None:
    a = scan_text("KeyError: 'input_ids'\n").primary.fingerprint
    b = scan_text("KeyError: 'labels'\n").primary.fingerprint
    c = scan_text("ValueError: 'input_ids'\n").primary.fingerprint
    assert len({a, b, c}) == 3


def test_normalize_masks_volatile_tokens_and_keeps_the_message() -> None:
    n = normalize(
        "2026-12-02T10:00:01.123Z [Rank 17] pid=4242 at 0x7f3a2b1c failed on 10.0.0.3:29500 "
        "reading /lustre/run7/iter_0001000/mp_rank_03.pt after 601234 ms"
    )
    for volatile in ("2026", "17", "4242", "0x7f3a", "10.0.0.3", "29500", "lustre", "601234"):
        assert volatile not in n, (volatile, n)
    assert "failed on" in n and "reading" in n
    assert fingerprint("x", "Rank 3 died") == fingerprint("x", "Rank 12 died")


def test_entity_is_kept_apart_from_the_fingerprint() -> None:
    a = scan_text("FileNotFoundError: [Errno 2] No such file or directory: '/data/a.bin'\n").primary
    b = scan_text("FileNotFoundError: [Errno 2] No such file or directory: '/data/b.bin'\n").primary
    assert a.fingerprint == b.fingerprint
    assert (a.entity, b.entity) == ("/data/a.bin", "/data/b.bin")


EXPECTED = {
    "cuda_nccl_cascade_8r.log": ("RESTART", "cuda_illegal_memory_access", 5),
    "oom_16r.log": ("RESTART", "cuda_oom", 11),
    "syntax_error_4r.log": ("STOP", "python_syntax_error", None),
    "xid_8r_srun.log": ("RESTART", "gpu_fallen_off_bus", None),
    "hang_8r_launcher.log": ("RESTART", "hang_detected", 6),
    "import_error_4r_mpi.log": ("STOP", "python_import_error", None),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_checked_in_samples(name: str) -> None:
    decision, cls, rank = EXPECTED[name]
    v = ra.analyze_file(LOGS / name)
    assert v.decision == decision and v.primary.failure_class == cls
    if rank is not None:
        assert v.primary.rank == rank
    assert v.evidence and all(e.line >= 1 for e in v.evidence)


def test_samples_match_the_generator() -> None:
    for name, kw in ML.SAMPLES.items():
        assert (LOGS / name).read_text() == ML.make_log(**kw), name
