"""Secret files (bearer tokens, the Slack token, the LLM API key) that are not regular
files: a one-line error at once, never a hang on a FIFO or a read of /dev/zero without end,
never a traceback for a directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from relaunch.restart_agent.llm.config import LLMConfig, LLMConfigError
from relaunch.restart_agent.secret_file import TokenFileError, read_token_file
from tests._service_helpers import REPO_ROOT, cli_env


@pytest.fixture
def odd_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: reading it by name would block forever
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    big = tmp_path / "big"
    big.write_bytes(b"k" * 100_000)
    return {"fifo": fifo, "zero": zero, "dir": tmp_path, "big": big}


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("fifo", "is not a regular file"),
        ("zero", "is not a regular file"),
        ("dir", "is not a regular file"),
        ("big", "is larger than 4096 bytes"),
    ],
)
def test_token_files_that_are_not_small_regular_files(odd_files, kind: str, says: str) -> None:
    with pytest.raises(TokenFileError) as err:
        read_token_file(str(odd_files[kind]), "--token-file")
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("fifo", "is not a regular file"),
        ("zero", "is not a regular file"),
        ("dir", "is a directory"),
        ("big", "is larger than 4096 bytes"),
    ],
)
def test_llm_key_files_that_are_not_small_regular_files(odd_files, kind: str, says: str) -> None:
    cfg = LLMConfig(base_url="http://127.0.0.1:1/v1", model="m", api_key_file=str(odd_files[kind]))
    with pytest.raises(LLMConfigError, match=says):
        cfg.load_api_key()


def test_analyze_with_a_fifo_as_llm_key_file_is_a_one_line_error(odd_files, tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_text("[rank0]: ValueError: bad\n")
    r = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "analyze", str(log)]
        + ["--ft-llm-base-url", "http://127.0.0.1:1/v1", "--ft-llm-model", "m"]
        + ["--ft-llm-api-key-file", str(odd_files["fifo"])],
        cwd=str(REPO_ROOT),
        env=cli_env({"RELAUNCH_HOME": str(tmp_path / "home")}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert "is not a regular file" in r.stderr and len(r.stderr.strip().splitlines()) == 1
