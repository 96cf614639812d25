"""The streaming line reader behind the model's window and the grounding check."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from relaunch.restart_agent.llm import logview


def _naive(data: bytes) -> dict[int, str]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines = lines[:-1]
    return {
        i + 1: line.rstrip(b"\r\n").decode("utf-8", "replace").replace("\x00", "")
        for i, line in enumerate(lines)
    }


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_agrees_with_a_naive_reader_at_any_chunk_boundary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(logview, "_CHUNK", chunk)
    rng = random.Random(chunk)
    for trial in range(60):
        parts = [
            rng.randbytes(rng.randint(0, 40)).replace(b"\n", b"x")
            + rng.choice([b"\n", b"\r\n", b"\n\n"])
            for _ in range(rng.randint(0, 50))
        ]
        data = b"".join(parts) + (b"last line, no newline" if trial % 2 else b"")
        path = tmp_path / f"log{trial}"
        path.write_bytes(data)
        naive = _naive(data)
        assert logview.count_lines(path) == len(naive)
        assert dict(logview.iter_lines(path)) == naive
        wanted = rng.sample(range(1, len(naive) + 5), min(6, len(naive) + 4))
        assert logview.read_lines(path, wanted) == {n: naive[n] for n in wanted if n in naive}
        center = rng.randint(1, len(naive) + 2)
        lines, _ = logview.window(path, center, 4, 2)
        assert lines == [(n, naive[n]) for n in range(max(1, center - 4), center + 3) if n in naive]
        tail, total = logview.window(path, None, 4, 2)
        assert total == len(naive)
        assert tail == [(n, naive[n]) for n in range(max(1, len(naive) - 6), len(naive) + 1)]


def test_a_huge_line_is_cut_and_numbering_continues(tmp_path: Path) -> None:
    path = tmp_path / "huge.log"
    path.write_bytes(b"first\n" + b"y" * (3 << 20) + b"\nafter the huge line\n")
    lines = dict(logview.iter_lines(path))
    assert lines[1] == "first" and lines[3] == "after the huge line"
    assert len(lines[2]) == logview.MAX_LINE_BYTES
    assert logview.read_lines(path, [3, 2]) == {
        3: "after the huge line",
        2: "y" * logview.MAX_LINE_BYTES,
    }


def test_bad_line_numbers_are_simply_absent(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_text("one\ntwo\n")
    assert logview.read_lines(path, [0, -3, 3, True, "1"]) == {}  # type: ignore[list-item]
    assert logview.read_lines(path, [2, 2, 1]) == {1: "one", 2: "two"}
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert logview.window(empty, None, 5, 5) == ([], 0)
    assert logview.window(empty, 3, 5, 5) == ([], None)
