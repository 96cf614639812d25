"""Flight Recorder reader: real dumps, JSON form, versions, malicious and broken files."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from relaunch.attribution.fr import NoDumpsError, analyze_paths
from relaunch.attribution.fr.reader import DumpError, decode, read_dump, read_paths, safe_loads
from tests._fr_helpers import real_dumps_dir, stalled_allreduce_job, write_dumps

REPO = Path(__file__).resolve().parents[3]


class _Evil:
    """Pickles to a call of os.system: what a hostile 'dump' would carry."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def _evil_dump(marker: Path) -> bytes:
    return pickle.dumps({"version": "2.9", "entries": [], "pg_status": {}, "x": _Evil(marker)})


def test_reads_real_nccl_dumps_and_links_pg_status_to_groups() -> None:
    ds = read_paths([real_dumps_dir("lock_gil_1st")])
    assert sorted(ds.dumps) == list(range(16))
    assert ds.problems == []
    assert [Path(p).name for p in ds.ignored] == ["fault_injection.log"]
    d9 = ds.dumps[9]
    assert d9.version == "2.9" and d9.comm_lib_version == "2.27.3"
    assert d9.entry_count == 0  # rank 9 wrote no entries: pg_status is linked by creation order
    assert d9.unmapped_pg_status == []
    tp = d9.groups["37"]
    assert (tp.desc, tp.status) == ("TENSOR_MODEL_PARALLEL_GROUP", (88683, None, 88683))
    assert tp.stalled_at is None
    d8 = ds.dumps[8].groups["37"]
    assert (d8.enqueued, d8.completed) == ({"coll": 88688}, {"coll": 88683})
    assert [op.seq for op in d8.pending] == [88684, 88685, 88686, 88687, 88688]
    assert d8.stalled_at == ("coll", 88684)
    assert d8.pending[0].type == "_reduce_scatter_base"


def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    data = _evil_dump(marker)
    # The payload is live: plain pickle.loads in a child process runs it.
    evil = tmp_path / "evil.bin"
    evil.write_bytes(data)
    code = f"import pickle; pickle.loads(open({str(evil)!r}, 'rb').read())"
    subprocess.run([sys.executable, "-c", code], check=False, timeout=60)
    assert marker.exists()
    marker.unlink()

    with pytest.raises(pickle.UnpicklingError, match="refused to load"):
        safe_loads(data)
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "_dump_0").write_bytes(data)
    with pytest.raises(
        NoDumpsError, match="refused to load posix.system|refused to load nt.system"
    ):
        analyze_paths([tmp_path / "set"])
    assert not marker.exists()


def test_malicious_rank_among_good_ones_is_listed_not_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    write_dumps(stalled_allreduce_job(4, culprits=[2]), tmp_path)
    (tmp_path / "_dump_3").write_bytes(_evil_dump(marker))
    result = analyze_paths([tmp_path])
    assert not marker.exists()
    assert [(u["rank"], u["error"][:14]) for u in result["unreadable"]] == [(3, "refused to loa")]
    # Rank 3's file is unusable, so it counts as a rank without data; rank 2 still lags.
    assert result["culprit_ranks"] == [2, 3]


def test_json_form_gives_the_same_analysis_as_pickle(tmp_path: Path) -> None:
    dumps = stalled_allreduce_job(8, culprits=[5])
    for d in dumps.values():  # the JSON writer emits pg_status numbers as strings
        for st in d["pg_status"].values():
            for k in st:
                st[k] = str(st[k])
    write_dumps(dumps, tmp_path / "j", prefix="nccl_trace_rank_", fmt="json")
    write_dumps(stalled_allreduce_job(8, culprits=[5]), tmp_path / "p")
    rj, rp = analyze_paths([tmp_path / "j"]), analyze_paths([tmp_path / "p"])
    assert rj["culprit_ranks"] == rp["culprit_ranks"] == [5]
    assert rj["groups"] == rp["groups"]


def test_file_name_prefixes(tmp_path: Path) -> None:
    dumps = stalled_allreduce_job(3, culprits=[1])
    for r, d in dumps.items():
        name = ["comm_lib_trace_rank_0", "_dump_1", "nccl_trace_rank_2.pkl"][r]
        (tmp_path / name).write_bytes(pickle.dumps(d, protocol=2))
    assert sorted(read_paths([tmp_path]).dumps) == [0, 1, 2]
    files = sorted(tmp_path.iterdir())
    assert analyze_paths(files)["culprit_ranks"] == [1]


def test_truncated_and_corrupt_files_are_reported_and_the_rest_analysed(tmp_path: Path) -> None:
    src = real_dumps_dir("gpu_error_2nd")
    shutil.copytree(src, tmp_path / "s")
    raw = (tmp_path / "s" / "_dump_3").read_bytes()
    (tmp_path / "s" / "_dump_3").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "s" / "_dump_4").write_bytes(b"\x80\x02garbage")
    (tmp_path / "s" / "_dump_5").write_bytes(b"")
    result = analyze_paths([tmp_path / "s"])
    errors = {u["rank"]: u["error"] for u in result["unreadable"]}
    assert errors[3].startswith("truncated or corrupt pickle")
    assert errors[4].startswith("truncated or corrupt pickle")
    assert errors[5] == "empty file"
    assert result["ranks_read"] == 13 and result["world_size"] == 16
    # Ranks 11-13 wait in sends to 3-5 in the default group; with no data from 3-5 the
    # analyzer cannot clear them, so they are named, and flagged as without a dump.
    assert result["culprit_ranks"] == [3, 4, 5, 9, 14]
    assert result["culprits_without_dump"] == [3, 4, 5]
    g0 = next(g for g in result["groups"] if g["id"] == "0")
    assert g0["missing_ranks"] == [3, 4, 5]


def test_missing_rank_dump_is_reported_and_counts_as_culprit(tmp_path: Path) -> None:
    shutil.copytree(real_dumps_dir("lock_gil_1st"), tmp_path / "s")
    (tmp_path / "s" / "_dump_9").unlink()
    result = analyze_paths([tmp_path / "s"])
    assert result["missing_ranks"] == [9]
    assert result["culprit_ranks"] == [9, 14]
    c9 = next(c for c in result["culprits"] if c["rank"] == 9)
    assert c9["dump"] == "missing"
    assert {g["how"] for g in c9["groups"]} == {"no dump"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (pickle.dumps([1, 2, 3], protocol=2), "no 'entries' list"),
        (pickle.dumps({"entries": []}, protocol=2), "no version, pg_config or pg_status"),
        (b"hello world\n", "neither a pickle nor JSON"),
        (b'{"entries": [', "truncated or corrupt JSON"),
        (b"", "empty file"),
    ],
)
def test_non_dumps_get_a_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(DumpError, match=message):
        decode(data)


def test_older_version_fields_and_states_without_pg_status(tmp_path: Path) -> None:
    """Early 2.x dumps: `seq_id`, no pg_status, no is_p2p; completion from entry state."""
    dumps = stalled_allreduce_job(4, culprits=[0], steps=3)
    for d in dumps.values():
        d["version"] = "2.1"
        d.pop("pg_status")
        for e in d["entries"]:
            e["seq_id"] = e.pop("collective_seq_id")
            for k in ("p2p_seq_id", "op_id", "is_p2p", "input_dtypes"):
                e.pop(k)
            e["state"] = "completed" if e["seq_id"] < 3 else "scheduled"
    write_dumps(dumps, tmp_path)
    result = analyze_paths([tmp_path])
    assert result["versions"] == ["2.1"]
    assert result["culprit_ranks"] == [0]
    g = result["groups"][0]
    assert g["stalled_op"]["seq_id"] == 3 and g["lagging_ranks"] == [0]


def test_explicit_dump_without_rank_in_name_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "dump.bin"
    p.write_bytes(pickle.dumps(stalled_allreduce_job(2, [])[0], protocol=2))
    with pytest.raises(DumpError, match="does not end in the rank number"):
        read_dump(p)


def test_duplicate_rank_files_keep_the_first(tmp_path: Path) -> None:
    write_dumps(stalled_allreduce_job(2, [1]), tmp_path / "a")
    write_dumps(stalled_allreduce_job(2, [1]), tmp_path / "b")
    result = analyze_paths([tmp_path / "a", tmp_path / "b"])
    assert len(result["duplicate_files"]) == 2 and result["culprit_ranks"] == [1]


def test_parallel_reading_matches_serial(tmp_path: Path) -> None:
    write_dumps(stalled_allreduce_job(16, culprits=[3, 11]), tmp_path)
    serial = analyze_paths([tmp_path], workers=1)
    parallel = analyze_paths([tmp_path], workers=2)
    assert json.dumps(serial, sort_keys=True) == json.dumps(parallel, sort_keys=True)
    assert serial["culprit_ranks"] == [3, 11]


@pytest.mark.parametrize("bad", [None, "x", -1, [], {}, [[1]], 2.5, True])
def test_wrong_typed_fields_never_crash(tmp_path: Path, bad: object) -> None:
    """Every field of every entry, pg_status and pg_config replaced by a wrong-typed value:
    the set is still analysed (the damaged rank may become unreadable), never a crash."""
    base = stalled_allreduce_job(3, culprits=[1], steps=2)
    fields = list(base[0]["entries"][0]) + ["pg_status", "pg_config", "version", "entries"]
    for i, field in enumerate(fields):
        dumps = stalled_allreduce_job(3, culprits=[1], steps=2)
        d = dumps[0]
        if field in d:
            d[field] = bad
        else:
            for e in d["entries"]:
                e[field] = bad
        out = tmp_path / str(i)
        write_dumps(dumps, out)
        result = analyze_paths([out])
        assert result["ranks_read"] + len(result["unreadable"]) == 3, field
        json.dumps(result)
