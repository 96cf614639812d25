"""Launcher/logger line formats around the failure text (issue 18 item 4, rank sources):
Open MPI's mpirun/prterun summaries (the process that failed, `rank_source: "mpirun"`)
and torch rank prefixes behind a timestamp / logger / worker lead. Each through the real
scanner and policy; the shapes are those of public issue threads (tests/fixtures/real)."""

from __future__ import annotations

import pytest

from relaunch.restart_agent import decide
from relaunch.restart_agent.prefixes import split_prefix
from tests._agent_helpers import scan_text

BANNER = (
    "Primary job  terminated normally, but 1 process returned\n"
    "a non-zero exit code. Per user-direction, the job has been aborted.\n"
)
FIRST = (
    "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
    "the job to be terminated. The first process to do so was:\n\n"
    "  Process name: [[35302,1],{rank}]\n  Exit code:    1\n"
)


@pytest.mark.parametrize(
    ("signal", "cls", "role"),
    [
        ("9 (Killed)", "killed_sigkill", "root"),
        ("11 (Segmentation fault)", "segfault", "root"),
        ("7 (Bus error)", "sigbus", "root"),
        ("4 (Illegal instruction)", "illegal_instruction", "root"),
        ("6 (Aborted)", "abort", "cascade"),
    ],
)
def test_mpirun_signal_summary_names_the_rank(signal: str, cls: str, role: str) -> None:
    for launcher in ("mpirun", "prterun"):
        line = f"{launcher} noticed that process rank 7 with PID 0 on node gpu03 exited on signal {signal}.\n"
        v = decide(scan_text(line))
        assert v.decision == "RESTART"
        assert (v.primary.failure_class, v.primary.role) == (cls, role)
        assert (v.primary.rank, v.primary.rank_source) == (7, "mpirun")
        # behind the banner (a rankless cascade, earlier): the rank is still the one reported
        v = decide(scan_text(BANNER + line))
        assert (v.primary.rank, v.primary.rank_source) == (7, "mpirun")
        assert "Open MPI" in v.basis and "reporter" not in v.basis


def test_mpirun_sigterm_is_teardown_not_a_root() -> None:
    line = "mpirun noticed that process rank 1 with PID 3 on node n2 exited on signal 15 (Terminated).\n"
    ev = scan_text(line)
    assert not ev.roots and ev.first_teardown_line == 1


def test_first_process_block_names_the_rank_of_a_rankless_root() -> None:
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/proj/train.py", line 723, in <module>\n'
        "    x = parts[0][0]\n"
        "IndexError: list index out of range\n"
    )
    v = decide(scan_text(tb + BANNER + FIRST.format(rank=5)))
    assert v.primary.failure_class == "python_index_error"
    assert (v.primary.rank, v.primary.rank_source) == (5, "mpirun")


def test_a_nonzero_exit_code_alone_is_a_cascade_that_names_the_failed_process() -> None:
    v = decide(scan_text(BANNER + FIRST.format(rank=251)))
    assert v.decision == "RESTART" and v.primary.role == "cascade"
    assert (v.primary.rank, v.primary.rank_source) == (251, "mpirun")
    assert not scan_text(BANNER + FIRST.format(rank=251)).roots


def test_two_different_failed_processes_name_no_rank() -> None:
    tb = "IndexError: list index out of range\n"
    v = decide(scan_text(tb + FIRST.format(rank=1) + FIRST.format(rank=2)))
    assert v.primary.rank is None


@pytest.mark.parametrize(
    "lead",
    [
        "2024-03-01 10:00:00,123 - ",
        "2024-11-20 14:37:16 ",
        "[2024-03-01 10:00:00] ",
        "[2024-03-01 10:00:00]",
        "I0301 10:00:00.123456 4711 train.py:88] ",
        "(RayTrainWorker pid=43515) ",
        "dinov2-giant-nodes.cn-d003.nolog [stderr] ",
    ],
)
def test_rank_prefix_behind_a_timestamp_or_logger_lead(lead: str) -> None:
    for prefix, rank in (("[rank3]:", 3), ("[rank 12]:", 12), ("[default5]:", 5)):
        line = (
            f"{lead}{prefix} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
        )
        split = split_prefix(line)
        assert (split.rank, split.body) == (
            rank,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        )
        assert line[split.rank_at : split.rank_at + len(str(rank))] == str(rank)
        ev = scan_text(line + "\n")
        assert (ev.primary.rank, ev.primary.rank_source) == (rank, "prefix")
        assert ev.primary.failure_class == "cuda_oom"


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: failed on [rank3]: boom",  # quoted inside a message: ": " in the lead
        "x" * 200 + " [rank3]: RuntimeError: boom",  # lead longer than MAX_LEAD
        "abc[rank3]: RuntimeError: boom",  # glued to a word, not a lead
        "2024-03-01 [rank3] RuntimeError: boom",  # no colon: not torch's prefix
    ],
)
def test_no_lead_rank_prefix_where_it_is_not_one(line: str) -> None:
    split = split_prefix(line)
    # (the last one's text before `RuntimeError` is a generic lead: it names no rank)
    assert split.rank is None and split.body in (line, "RuntimeError: boom")


# A TypeError traceback from the user's own code, as every layout below carries it.
TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/home/u/proj/train.py", line 120, in <module>',
    "    main()",
    '  File "/home/u/proj/model.py", line 42, in forward',
    "    x = self.embed(ids) + self.pos",
    "TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType'",
)


@pytest.mark.parametrize(
    ("lead", "rank"),
    [
        ("2024-03-01T10:00:00.123456789Z stderr F ", None),  # containerd / CRI log file
        ("2024-03-01T10:00:00.1234567Z ", None),  # kubectl --timestamps, CI runners
        ("[pod/job-worker-0/pytorch] ", None),  # kubectl logs --prefix
        ("worker-1: ", None),  # pdsh (DeepSpeed's multi-node runner): a host, not a rank
        ("10.0.0.3: ", None),
        ("trainer/0 [3]:", None),  # torchx: role/replica, not a global rank
        (" 18 ", None),  # a line number pasted with the log
        ("> ", None),  # a quoted paste
        ("ERROR:root:", None),  # logging's default format
        ("2024-01-01 10:00:00.000 | ERROR    | __main__:main:12 - ", None),  # loguru
        ("[36m(RayTrainWorker pid=7)[0m ", None),  # Ray's colour codes, escape lost
        ("[3]<stderr>:", 3),  # horovodrun (gloo controller)
        ("[1,mpirank:3,algo-1]<stderr>:", 3),  # SageMaker's MPI tag
        ("worker-1: [rank5]: ", 5),  # pdsh around torch's own prefix
        ("[RANK 4] ", 4),  # a logger's upper-case rank tag
        ("Mon Sep 24 14:28:29 2018[1,6]<stderr>:", 6),  # mpirun --timestamp-output, glued
    ],
)
def test_traceback_behind_any_lead_is_read(lead: str, rank: int | None) -> None:
    """A collector's, logger's or paste's lead before every line hides nothing: the
    exception is read (workload, STOP at an identical second startup cycle) and a rank is
    named only where the lead is a rank tag."""
    ev = scan_text("".join(f"{lead}{line}\n" for line in TRACEBACK))
    assert ev.primary is not None and ev.primary.failure_class == "python_type_error"
    assert ev.primary.rank == rank
    assert ev.primary.user_frame == "/home/u/proj/model.py:42"  # the frames were read too


def test_traceback_on_one_line_is_read_as_its_lines() -> None:
    """A paste that lost its line breaks (the whole traceback on one physical line, behind
    the line's own prefix) is read as the lines it was; the rank prefix applies to all."""
    for prefix, rank in (("", None), ("[rank2]: ", 2), ("worker-1: ", None)):
        ev = scan_text(prefix + " ".join(TRACEBACK) + "\n")
        assert ev.primary is not None, prefix
        assert (ev.primary.failure_class, ev.primary.rank) == ("python_type_error", rank)
        assert ev.primary.text.startswith("TypeError: unsupported operand")


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: Caught ValueError in DataLoader worker process 0.",  # starts with it
        "RuntimeError: failed: ValueError: x",  # a message naming another exception
        "    except KeyError:",  # a code line of a traceback
        '    raise ValueError("bad value")',
        'msg = "see TypeError: x"',  # a quote in the lead: a message, not a lead
        "x" * 170 + " TypeError: boom",  # lead longer than MAX_LEAD
        "abcTypeError: boom",  # glued to a word
        "INFO step 10 loss=nan",  # nothing to read behind it
        # an exception line whose type ends in neither Error nor Exception: its message names one
        "etcd.EtcdConnectionFailed: Connection to etcd failed due to MaxRetryError",
        "EtcdConnectionFailed: refused: KeyError: 'x'",
        "worker-1: training failed due to MaxRetryError",  # a bare name ending a sentence
    ],
)
def test_no_generic_lead_where_there_is_none(line: str) -> None:
    split = split_prefix(line)
    assert split.rank is None and not split.generic and split.body == line
