"""`relaunch analyze` inputs beyond a plain file: gzip, stdin, binary files, progress on a
terminal, escape sequences from logs, half LLM options (issues 12 item 8 and 13)."""

from __future__ import annotations

import gzip
import json
import os
import pty
import random
import subprocess
import sys
import threading
from pathlib import Path

from tests._llm_helpers import answer, write_log
from tests._storage_helpers import REPO_ROOT, infra_log

ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
CMD = [sys.executable, "-m", "relaunch.cli", "analyze"]


def run(*args: str | Path, stdin: bytes | None = None, stderr=subprocess.PIPE, env=None):
    return subprocess.run(
        [*CMD, *map(str, args)],
        cwd=REPO_ROOT,
        env=env or ENV,
        input=stdin,
        stdout=subprocess.PIPE,
        stderr=stderr,
        timeout=120,
    )


def verdict(p: subprocess.CompletedProcess[bytes]) -> dict:
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def one_line_error(p: subprocess.CompletedProcess[bytes], needle: str) -> str:
    err = p.stderr.decode()
    assert p.returncode == 2, err
    assert p.stdout == b"" and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("relaunch analyze: error:"), err
    assert needle in err, err
    return err


def test_gzip_and_stdin_give_the_plain_files_verdict(tmp_path):
    text = infra_log().encode()
    plain = tmp_path / "cycle_0.log"
    plain.write_bytes(text)
    gz = tmp_path / "cycle_0.log.gz"
    gz.write_bytes(gzip.compress(text[:500]) + gzip.compress(text[500:]))  # two members
    want = verdict(run(plain, "--format", "json"))
    assert want["primary"]["failure_class"] == "nccl_error"
    for got in (
        verdict(run(gz, "--format", "json")),
        verdict(run("-", "--format", "json", stdin=text)),
        verdict(run("-", "--format", "json", stdin=gzip.compress(text))),
    ):
        assert got["primary"] == want["primary"] and got["decision"] == want["decision"]
        assert got["scan"]["bytes"] == len(text)


def test_stdin_with_a_database_records_no_path(tmp_path):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    v = verdict(
        run("-", "--db", db, "--job-id", "j", "--format", "json", stdin=infra_log().encode())
    )
    assert v["cycle"] == 0 and v["log"]["path"] is None and len(v["log"]["sha256"]) == 64


def test_truncated_gzip_is_analysed_with_a_warning(tmp_path):
    data = gzip.compress(infra_log().encode() * 20)
    gz = tmp_path / "cut.log.gz"
    gz.write_bytes(data[: len(data) - 40])
    p = run(gz, "--format", "json")
    v = verdict(p)
    assert v["primary"]["failure_class"] == "nccl_error"
    assert "warning: " in p.stderr.decode() and "truncated gzip" in p.stderr.decode()


def test_corrupt_gzip_is_a_one_line_error(tmp_path):
    gz = tmp_path / "bad.log.gz"
    gz.write_bytes(
        b"\x1f\x8b\x08\x00" + bytes(random.Random(1).randrange(256) for _ in range(4000))
    )
    one_line_error(run(gz), "gzip")


def test_binary_files_are_refused_unless_allowed(tmp_path):
    rnd = tmp_path / "random.bin"
    rnd.write_bytes(random.Random(7).randbytes(100_000))
    one_line_error(run(rnd), "looks like a binary file")
    elf = tmp_path / "a.out"
    elf.write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 100 + infra_log().encode())
    one_line_error(run(elf), "an ELF executable")
    v = verdict(run(elf, "--allow-binary", "--format", "json"))
    assert v["primary"]["failure_class"] == "nccl_error"


def test_logs_with_nul_runs_and_some_junk_are_analysed(tmp_path):
    """A crashed node leaves NUL blocks (even at the start); a log with a binary blob in
    the middle is still a log: both are analysed."""
    junk = random.Random(3).randbytes(20_000)
    log = tmp_path / "crashed.log"
    log.write_bytes(
        b"\x00" * 65536 + b"[rank0]: step 1\x00\x00\n" + junk + b"\n" + infra_log().encode()
    )
    v = verdict(run(log, "--format", "json"))
    assert v["primary"]["failure_class"] == "nccl_error"


def test_ft_llm_base_url_without_a_model_is_an_error(tmp_path):
    log = tmp_path / "i.log"
    log.write_text(infra_log())
    one_line_error(run(log, "--ft-llm-base-url", "http://127.0.0.1:9/v1"), "--ft-llm-model")


def test_text_output_escapes_terminal_control_sequences(tmp_path):
    evil = "\x1b]0;pwned\x07\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\\x1b[2J\x9b31m\u202e"
    log = tmp_path / "evil.log"
    log.write_text(infra_log().replace("unhandled system error", "unhandled system error " + evil))
    out = run(log).stdout.decode()
    assert "unhandled system error" in out
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in out
    assert "\\x1b]0;pwned\\x07" in out and "\\x1b[2J" in out and "\\u202e" in out


def _big_log(tmp_path: Path) -> Path:
    log = tmp_path / "big.log"
    with open(log, "wb") as f:
        line = b"[rank0]: iteration 1 | loss 1.0 | " + b"x" * 90 + b"\n"
        f.write(line * (17 * (1 << 20) // len(line) + 1))
        f.write(infra_log().encode())
    return log


def test_progress_bar_only_when_stderr_is_a_terminal(tmp_path):
    log = _big_log(tmp_path)
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    p = run(log, "--format", "json", stderr=slave)
    os.close(slave)
    reader.join(timeout=60)
    os.close(master)
    assert p.returncode == 0
    shown = b"".join(chunks).decode()
    assert "100%" in shown and "[####" in shown and "\r" in shown
    assert json.loads(p.stdout)["primary"]["failure_class"] == "nccl_error"
    piped = run(log, "--format", "json")
    assert piped.returncode == 0 and piped.stderr == b""  # not a terminal: nothing drawn


def test_llm_reads_the_decompressed_text_of_a_gzip_log(llm_server, key_file, tmp_path):
    """The LLM's context lines come from the text that was analysed, not the gzip bytes."""
    log, line = write_log(tmp_path)
    gz = tmp_path / "cycle.log.gz"
    gz.write_bytes(gzip.compress(log.read_bytes()))
    model = llm_server.script([{"content": answer(line)}])
    flags = ["--llm", "--ft-llm-base-url", llm_server.base_url, "--ft-llm-model", model]
    flags += ["--ft-llm-api-key-file", str(key_file)]
    spool = tmp_path / "tmp"
    spool.mkdir()
    env = {**ENV, "TMPDIR": str(spool)}
    for source, stdin in ((gz, None), ("-", gz.read_bytes())):
        v = verdict(run(source, "--format", "json", *flags, stdin=stdin, env=env))
        assert v["llm"]["status"] == "ok" and v["llm"]["grounded"] is True, v["llm"]
        assert v["llm"]["citations"]["owner"][0]["line"] == line
        model = llm_server.script([{"content": answer(line)}])
        flags[flags.index("--ft-llm-model") + 1] = model
    assert list(spool.iterdir()) == []  # the spooled copies are removed
