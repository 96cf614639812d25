"""Real Flight Recorder dumps from a real 4-process gloo job with a hung rank (CPU torch)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from relaunch.attribution.fr import analyze_paths
from tests._fr_helpers import run_gloo_job

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gloo_dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch.distributed")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch build has no gloo backend")
    out = tmp_path_factory.mktemp("gloo") / "dumps"
    tails = run_gloo_job(out, world=4, hang_rank=3, port=_free_port(), json_ranks=[0, 2])
    if len(list(out.glob("_dump_*"))) != 4:
        pytest.fail("workers wrote no dumps; stderr tails:\n" + "\n---\n".join(tails))
    return out


def test_real_gloo_dumps_name_the_hung_rank(gloo_dumps: Path) -> None:
    """Rank 3 never enters the all-reduce of pair [2, 3]; rank 2 waits in it; ranks 0 and 1
    move on and wait in an all-reduce on the world group that 2 and 3 never reach."""
    result = analyze_paths([gloo_dumps])
    assert result["versions"] == ["2.10"]
    assert result["ranks_read"] == 4 and result["missing_ranks"] == []
    assert result["culprit_ranks"] == [3]
    groups = {g["description"]: g for g in result["groups"]}
    pair = groups["pair2"]
    assert pair["ranks"] == [2, 3] and pair["waiting_ranks"] == [2]
    assert pair["lagging_ranks"] == [3] and pair["culprit_ranks"] == [3]
    assert pair["stalled_op"]["type"] == "all_reduce"
    assert pair["stalled_op"]["sizes"] == [[2, 3]] and pair["stalled_op"]["dtype"] == "Float"
    world = groups["default_pg"]
    assert world["waiting_ranks"] == [0, 1]
    assert world["lagging_ranks"] == [2, 3] and world["blocked_elsewhere"] == [2]
    assert world["stalled_op"]["sizes"] == [[5]]


def test_real_gloo_set_mixes_pickle_and_json_forms(gloo_dumps: Path) -> None:
    names = sorted(p.name for p in gloo_dumps.iterdir())
    assert names == ["_dump_0.json", "_dump_1", "_dump_2.json", "_dump_3"]
    assert (gloo_dumps / "_dump_1").read_bytes()[
        :1
    ] == b"\x80"  # pickle (re-written with pg_config)
    assert (gloo_dumps / "_dump_0.json").read_bytes()[:1] == b"{"


def test_real_gloo_dump_without_one_rank(gloo_dumps: Path, tmp_path: Path) -> None:
    """Drop rank 2's dump: the world group's waiters now wait on a rank with no data."""
    for p in gloo_dumps.glob("_dump_*"):
        if p.name != "_dump_2.json":
            (tmp_path / p.name).write_bytes(p.read_bytes())
    result = analyze_paths([tmp_path])
    assert result["missing_ranks"] == [2]
    assert result["culprit_ranks"] == [2, 3]
    assert result["culprits_without_dump"] == [2]
