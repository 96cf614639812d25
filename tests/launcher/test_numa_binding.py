"""`--numa-binding`: the plan from a fake 2-node sysfs tree (round-robin by local rank),
and real workers started by `relaunch run` whose `os.sched_getaffinity(0)` is checked,
on this machine's real topology and on a fake one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from relaunch.launcher.numa import NumaError, gpus_visible, numa_nodes, plan_binding
from relaunch.launcher.sysfs import parse_cpulist
from tests._launcher_helpers import REPO, job_args, relaunch_env

WORKER = REPO / "tests" / "workers" / "health_job.py"

pytestmark = pytest.mark.skipif(
    gpus_visible(), reason="GPUs visible: torch's own binding applies (checked on the device)"
)


def fake_topology(root: Path, nodes: dict[int, str], sockets: dict[int, int],
                  llc: dict[int, str] | None = None) -> Path:  # fmt: skip
    """NUMA node -> cpulist; CPU -> socket; CPU -> its L3 shared_cpu_list."""
    for n, cpulist in nodes.items():
        d = root / "devices/system/node" / f"node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpulist + "\n")
    (root / "devices/system/node/possible").write_text(f"0-{max(nodes)}\n")
    for cpu, sock in sockets.items():
        t = root / "devices/system/cpu" / f"cpu{cpu}" / "topology"
        t.mkdir(parents=True)
        (t / "physical_package_id").write_text(f"{sock}\n")
        if llc:
            c = root / "devices/system/cpu" / f"cpu{cpu}" / "cache" / "index3"
            c.mkdir(parents=True)
            (c / "type").write_text("Unified\n")
            (c / "level").write_text("3\n")
            (c / "shared_cpu_list").write_text(llc[cpu] + "\n")
    return root


@pytest.fixture
def two_nodes(tmp_path: Path) -> Path:
    # node0: CPUs 0-3 on socket 0, node1: CPUs 4-7 on socket 1; L3 groups of 2 CPUs
    return fake_topology(
        tmp_path / "sys",
        {0: "0-3", 1: "4-7"},
        {c: c // 4 for c in range(8)},
        {c: f"{c - c % 2}-{c - c % 2 + 1}" for c in range(8)},
    )


ALL = set(range(8))


def test_node_round_robin(two_nodes: Path) -> None:
    plan = plan_binding("node", 4, root=two_nodes, allowed=ALL)
    assert plan == {0: {0, 1, 2, 3}, 1: {4, 5, 6, 7}, 2: {0, 1, 2, 3}, 3: {4, 5, 6, 7}}


def test_exclusive_splits_a_node_between_its_ranks(two_nodes: Path) -> None:
    plan = plan_binding("exclusive", 4, root=two_nodes, allowed=ALL)
    assert plan == {0: {0, 1}, 1: {4, 5}, 2: {2, 3}, 3: {6, 7}}


def test_core_complex_takes_last_level_cache_groups_in_turn(two_nodes: Path) -> None:
    plan = plan_binding("core-complex", 4, root=two_nodes, allowed=ALL)
    assert plan == {0: {0, 1}, 1: {4, 5}, 2: {2, 3}, 3: {6, 7}}


def test_socket_takes_every_node_of_the_socket(tmp_path: Path) -> None:
    root = fake_topology(
        tmp_path / "sys", {0: "0-1", 1: "2-3", 2: "4-5"}, {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1}
    )
    plan = plan_binding("socket", 3, root=root, allowed=set(range(6)))
    assert plan == {0: {0, 1, 2, 3}, 1: {0, 1, 2, 3}, 2: {4, 5}}


def test_allowed_cpus_trim_the_plan(two_nodes: Path) -> None:
    assert plan_binding("node", 2, root=two_nodes, allowed={1, 2, 5}) == {0: {1, 2}, 1: {5}}


def test_unusable_topology(tmp_path: Path) -> None:
    with pytest.raises(NumaError, match="no NUMA topology"):
        numa_nodes(tmp_path)
    with pytest.raises(ValueError, match="unknown NUMA binding"):
        plan_binding("rack", 1, root=tmp_path)


def _run(tmp_path: Path, mode: str, nproc: int, sysfs: Path | None = None):  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    env = relaunch_env(tmp_path)
    if sysfs is not None:
        env["RELAUNCH_SYSFS_ROOT"] = str(sysfs)
    args = job_args(tmp_path, f"numa-{mode}", "--ft-attribution-endpoint", "off",
                    "--numa-binding", mode, "--tee", "3") + [str(WORKER)]  # fmt: skip
    args[args.index("--nproc-per-node") + 1] = str(nproc)
    r = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "run", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    found = {
        int(m.group(1)): {int(c) for c in m.group(2).split(",")}
        for m in re.finditer(r"affinity rank=(\d+) cpus=([\d,]+)", r.stdout + r.stderr)
    }
    assert sorted(found) == list(range(nproc)), r.stdout + r.stderr
    return found, r


@pytest.mark.slow
def test_workers_bound_on_this_machine(tmp_path: Path) -> None:
    """Each worker's affinity is its NUMA node's cpulist (round-robin by local rank)."""
    import os

    base = Path("/sys/devices/system/node")
    cpulists = {
        int(p.name[4:]): parse_cpulist((p / "cpulist").read_text())
        for p in base.glob("node[0-9]*")
        if (p / "cpulist").read_text().strip()
    }
    ids = sorted(cpulists)
    allowed = os.sched_getaffinity(0)
    found, r = _run(tmp_path, "node", 2)
    for rank, cpus in found.items():
        expect = cpulists[ids[rank % len(ids)]] & allowed or cpulists[ids[rank % len(ids)]]
        assert cpus == expect
    assert "relaunch: NUMA binding node from sysfs" in r.stderr


@pytest.mark.slow
def test_workers_bound_round_robin_on_a_fake_two_node_tree(tmp_path: Path) -> None:
    """Two fake nodes made of this machine's first two CPUs: rank 0 on one, rank 1 on the
    other, rank 2 on the first again."""
    import os

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 usable CPUs to split into 2 fake NUMA nodes")
    a, b = cpus[0], cpus[1]
    root = fake_topology(tmp_path / "sys", {0: str(a), 1: str(b)}, {a: 0, b: 0})
    found, r = _run(tmp_path, "node", 3, root)
    assert found == {0: {a}, 1: {b}, 2: {a}}
    assert f"0->{a}, 1->{b}, 2->{a}" in r.stderr
