"""The streaming scanner: rank prefixes, interleaved tracebacks, chunking equality, and bad
input (empty, binary, non-UTF-8, CRLF, truncated, over-long lines, missing, unreadable,
a 2 GB sparse file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import relaunch.restart_agent as ra
from tests._agent_helpers import LOGS, make_logs, random_chunkings, scan_chunked, scan_text

ML = make_logs()


@pytest.mark.parametrize(
    ("prefix", "line"),
    [
        ("rank", "[rank3]: RuntimeError: CUDA error: unspecified launch failure"),
        ("rank-nospace", "[rank3]:RuntimeError: CUDA error: unspecified launch failure"),
        ("default", "[default3]: RuntimeError: CUDA error: unspecified launch failure"),
        ("srun", "3: RuntimeError: CUDA error: unspecified launch failure"),
        ("srun-padded", "  3: RuntimeError: CUDA error: unspecified launch failure"),
        ("mpi", "[1,3]<stderr>: RuntimeError: CUDA error: unspecified launch failure"),
        ("launcher", "[rank 3]: RuntimeError: CUDA error: unspecified launch failure"),
    ],
)
def test_rank_prefixes(prefix: str, line: str) -> None:
    ev = scan_text(line + "\n")
    assert ev.primary is not None and ev.primary.rank == 3
    assert ev.primary.text == "RuntimeError: CUDA error: unspecified launch failure"
    assert ev.ranks_seen == [3]


def test_launcher_lines_carry_their_rank_field_and_no_prefix_rank() -> None:
    ev = scan_text("[relaunch] hang detected: rank 12 missed heartbeat for 60.0 s\n")
    assert ev.primary.failure_class == "hang_detected" and ev.primary.rank == 12
    assert ev.ranks_seen == []


INTERLEAVED = """\
[rank1]: Traceback (most recent call last):
[rank0]: Traceback (most recent call last):
[rank1]:   File "/work/train.py", line 10, in <module>
[rank0]:   File "/work/train.py", line 10, in <module>
[rank0]:   File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1736, in _call_impl
[rank1]:   File "/work/data.py", line 57, in __getitem__
[rank0]:   File "/work/model.py", line 99, in forward
[rank1]: KeyError: 'input_ids'
[rank0]: RuntimeError: NCCL communicator was aborted on rank 0.
"""


def test_interleaved_tracebacks_are_grouped_per_rank() -> None:
    ev = scan_text(INTERLEAVED)
    assert ev.primary.failure_class == "python_key_error"
    assert ev.primary.rank == 1 and ev.primary.line == 8
    assert ev.primary.entity == "/work/data.py:57"
    assert [c["line"] for c in ev.primary.context] == [3, 6]
    aborted = [e for e in ev.cascade_evidence if e.failure_class == "nccl_comm_aborted"]
    assert aborted[0].rank == 0
    assert [c["line"] for c in aborted[0].context] == [4, 5, 7]
    assert aborted[0].user_frame == "/work/model.py:99"
    assert ev.failed_ranks == [0, 1]


def _corpus() -> dict[str, bytes]:
    out = {p.name: p.read_bytes() for p in sorted(LOGS.glob("*.log"))}
    base = ML.make_log("cuda_nccl_cascade", ranks=16, lines=300, seed=9, dialect="hf").encode()
    out["crlf"] = base.replace(b"\n", b"\r\n")
    out["no_trailing_newline"] = base.rstrip(b"\n")
    long_line = b"[rank2]: " + b"x" * 70_000 + b" RuntimeError: CUDA error: misaligned address\n"
    middle = (
        b"[rank4]: " + b"y" * 40_000 + b"ValueError: hidden in the middle" + b"z" * 40_000 + b"\n"
    )
    out["long_lines"] = base[:2000] + long_line + middle + base[2000:]
    out["non_utf8"] = base[:500] + b"\xff\xfe\xc3(\x80 KeyError: '\xe9t\xe9'\n" + base[500:]
    out["tqdm_cr"] = (
        b"".join(
            b"\r%3d%%|####| %d/1000 [00:01<00:10, 9.1it/s]" % (i // 10, i) for i in range(0, 600, 7)
        )
        + b"\nRuntimeError: CUDA error: misaligned address\n"
    )
    return out


CORPUS = _corpus()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_any_chunking_gives_the_same_evidence_as_scan_file(name: str, tmp_path: Path) -> None:
    data = CORPUS[name]
    path = tmp_path / "log"
    path.write_bytes(data)
    expected = ra.scan_file(path)
    assert expected.bytes == len(data)
    for sizes in random_chunkings(hash(name) & 0xFFFF, 14, max(2, len(data) // 3)):
        assert scan_chunked(data, sizes) == expected, sizes
    assert ra.scan_file(path, chunk_size=5) == expected


def test_crlf_and_truncated_last_line() -> None:
    ev = scan_text(
        b"[rank0]: step 5 | loss 2.0\r\n[rank1]: RuntimeError: CUDA error: misaligned address"
    )
    assert ev.lines == 2 and ev.truncated_last_line
    assert ev.primary.line == 2 and ev.primary.text.endswith("misaligned address")
    assert ev.progress.last_iteration == 5


def test_over_long_line_keeps_head_and_tail_only() -> None:
    ev = ra.LogScanner()
    ev.feed(b"[rank2]: " + b"x" * 70_000 + b" RuntimeError: CUDA error: misaligned address\n")
    got = ev.finish()
    # a misaligned address is a kernel programming error (tests/restart_agent/test_agent_general_rules.py)
    assert got.primary.failure_class == "cuda_kernel_error" and got.primary.rank == 2
    hidden = scan_text(b"[rank4]: " + b"y" * 40_000 + b"ValueError: gone" + b"z" * 40_000 + b"\n")
    assert hidden.primary is None and hidden.lines == 1


def test_non_utf8_failure_line_is_decoded_with_replacement() -> None:
    ev = scan_text(b"[rank5]: KeyError: '\xe9t\xe9'\n")
    assert ev.primary.failure_class == "python_key_error"
    assert "\ufffd" in ev.primary.text


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    ev = ra.scan_file(p)
    assert (ev.primary, ev.lines, ev.bytes, ev.truncated_last_line) == (None, 0, 0, False)
    assert not ev.progress.known
    v = ra.analyze_file(p)
    assert (v.decision, v.rule) == ("RESTART", "restart.no_evidence")


def test_binary_file_is_analysed_not_crashed_on(tmp_path: Path) -> None:
    p = tmp_path / "core.bin"
    p.write_bytes(bytes(range(256)) * 4000 + b"\nSIGSEGV\x00\xff\n")
    ev = ra.scan_file(p)
    assert ev.bytes == 256 * 4000 + 11
    assert ev.primary is not None and ev.primary.failure_class == "segfault"


def test_missing_directory_and_unreadable_files_raise_os_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ra.scan_file(tmp_path / "missing.log")
    with pytest.raises(FileNotFoundError):
        ra.analyze_file(tmp_path / "missing.log")
    with pytest.raises(IsADirectoryError):
        ra.scan_file(tmp_path)
    p = tmp_path / "secret.log"
    p.write_text("x\n")
    p.chmod(0)
    try:
        if os.geteuid() == 0:
            pytest.skip("running as root: a mode-000 file is still readable")
        with pytest.raises(PermissionError):
            ra.scan_file(p)
    finally:
        p.chmod(0o600)


def test_sparse_2gb_file_of_zeros_with_a_failure_at_the_end(tmp_path: Path) -> None:
    p = tmp_path / "sparse.log"
    size = 2 * 1024**3
    tail = b"\n[rank9]: RuntimeError: CUDA error: unspecified launch failure\n"
    with open(p, "wb") as f:
        f.truncate(size - len(tail))
        f.seek(size - len(tail))
        f.write(tail)
    ev = ra.scan_file(p, chunk_size=8 << 20)
    assert ev.bytes == size and ev.lines == 2
    assert ev.primary.failure_class == "cuda_launch_failure"
    assert (ev.primary.line, ev.primary.rank) == (2, 9)


def test_feed_after_finish_is_an_error() -> None:
    s = ra.LogScanner()
    s.feed(b"x\n")
    first = s.finish()
    assert s.finish() is first
    with pytest.raises(RuntimeError):
        s.feed(b"y\n")


def test_feed_zeros_equals_feeding_nul_bytes() -> None:
    for n in (0, 1, 100, 70_000, 200_000):
        for before in (b"", b"[rank1]: Error", b"x" * 50_000):
            a = ra.LogScanner()
            a.feed(before)
            a.feed(bytes(n))
            a.feed(b" tail RuntimeError: CUDA error: misaligned address\nnext\n")
            b = ra.LogScanner()
            b.feed(before)
            b.feed_zeros(n)
            b.feed(b" tail RuntimeError: CUDA error: misaligned address\nnext\n")
            assert a.finish() == b.finish(), (n, len(before))


def test_sparse_file_with_data_in_the_middle_equals_plain_read(tmp_path: Path) -> None:
    p = tmp_path / "holes.log"
    with open(p, "wb") as f:
        f.write(b"[rank0]: step 3 | loss 1\n")
        f.seek(5 << 20)
        f.write(b"\n[rank1]: KeyError: 'k'\n")
        f.truncate(12 << 20)
    sparse = ra.scan_file(p, chunk_size=1 << 20)
    plain = ra.LogScanner()
    plain.feed(p.read_bytes())
    assert sparse == plain.finish()
    assert sparse.primary.failure_class == "python_key_error" and sparse.bytes == 12 << 20
