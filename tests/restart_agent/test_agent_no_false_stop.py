"""No false STOP on infrastructure faults while the job progresses (issue 18, must not
regress): long multi-cycle histories of NCCL/IB errors, Xid, ECC, preemption, host OOM
kills and segfaults on random ranks, with cascades, teardown noise and launcher facts,
each cycle advancing the job (sometimes without progress lines at all) - never a STOP."""

from __future__ import annotations

import random

import pytest

from tests._agent_helpers import fact, run_job

FAULTS = {
    "nccl_ib": "[rank{r}]: node{n}:11:22 [{r}] NCCL WARN NET/IB : Got completion from peer 10.0.0.{n}<40527> with error 12, opcode 0, len 0, vendor err 129\n",
    "nccl_system": "[rank{r}]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n",
    "xid": "NVRM: Xid (PCI:0000:{n}b:00): 79, pid={pid}, name=python, GPU has fallen off the bus.\n",
    "ecc": "[rank{r}]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n",
    "preemption": "slurmstepd: error: *** STEP 77.0 ON node{n} CANCELLED AT 2026-12-02T10:00:01 DUE TO PREEMPTION ***\n",
    "host_oom": "[{t}.5] Out of memory: Killed process {pid} (python) total-vm:92345678kB\n",
    "segfault": "[rank{r}]: Fatal Python error: Segmentation fault\n",
    "sigkill_launcher": "",  # only the launcher knows: rank_exit fact with SIGKILL
}
NOISE = [
    "[rank{o}]: [E1202 10:21:13 ProcessGroupNCCL.cpp:616] [Rank {o}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE) ran for 600123 milliseconds before timing out.\n",
    "[rank{o}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.{n}]:59436\n",
    "W1202 10:21:14 torch/distributed/elastic/multiprocessing/api.py:900] Sending process {pid} closing signal SIGTERM\n",
    "[rank{o}]: RuntimeError: [{o}] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer\n",
]


def _cycle(rnd: random.Random, i: int, kind: str, world: int, with_facts: bool, lines: bool) -> str:
    r = rnd.randrange(world)
    pid = 10000 + 100 * i + r
    fill = {"r": r, "n": r // 8, "pid": pid, "t": 1000 + i}
    out = []
    it0, it1 = 100 * i + 1, 100 * (i + 1)
    if lines:
        out += [f"[rank{q}]: step {it0} | loss 2.1\n" for q in range(world)]
        out += [f"[rank{q}]: step {it1} | loss 2.0\n" for q in range(world)]
    out.append(FAULTS[kind].format(**fill))
    for _ in range(rnd.randint(0, 6)):
        o = rnd.randrange(world)
        out.append(rnd.choice(NOISE).format(o=o, n=o // 8, pid=pid + 1, seq=rnd.randint(1, 9)))
    if kind in ("host_oom", "segfault"):
        # torch elastic reports the dead process with its pid
        code = -9 if kind == "host_oom" else -11
        out.append(
            f"E1202 10:21:15 api.py:869] failed (exitcode: {code}) local_rank: {r % 8} (pid: {pid}) of binary: /usr/bin/python\n"
        )
    if with_facts or kind == "sigkill_launcher":
        out.insert(0, fact("cycle_start", cycle=i, world_size=world, ranks=list(range(world))))
        code = (
            -9 if kind in ("sigkill_launcher", "host_oom") else (-11 if kind == "segfault" else 1)
        )
        out.append(fact("rank_exit", cycle=i, rank=r, exitcode=code, first=True, t_s=500.0))
        out.append(
            fact("iterations", cycle=i, last={str(q): it1 for q in range(world)}, client=True)
        )
        out.append(fact("cycle_end", cycle=i, outcome="failed", duration_s=3600.0))
    return "".join(out)


@pytest.mark.parametrize("seed", range(12))
def test_infrastructure_faults_while_the_job_progresses_never_stop(seed: int) -> None:
    rnd = random.Random(seed)
    world = rnd.choice([2, 4, 8, 16])
    with_facts = seed % 3 == 0
    logs = []
    for i in range(15):
        kind = rnd.choice(sorted(FAULTS))
        # one cycle in four has no progress lines (the launcher's facts may still say)
        lines = rnd.random() > 0.25 or i == 0
        logs.append(_cycle(rnd, i, kind, world, with_facts, lines))
    verdicts = run_job(logs)
    stops = [(i, v.rule, v.basis) for i, v in enumerate(verdicts) if v.decision == "STOP"]
    assert stops == []


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_the_same_infrastructure_fault_every_cycle_while_progressing_never_stops(kind: str) -> None:
    rnd = random.Random(kind)
    logs = [_cycle(rnd, i, kind, 8, kind == "sigkill_launcher", True) for i in range(12)]
    verdicts = run_job(logs)
    assert [v.decision for v in verdicts] == ["RESTART"] * 12, [v.rule for v in verdicts]
    assert all(v.rule == "restart.progress" for v in verdicts[1:])
