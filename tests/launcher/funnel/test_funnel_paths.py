"""Log funnel path confinement against a real directory tree (traversal, symlinks, ...)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from relaunch.launcher.funnel.paths import PathRejected, confine, open_confined


@pytest.fixture()
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.log").write_text("secret\n")
    (root / "inner").mkdir()
    os.symlink(outside, root / "out_dir")
    os.symlink(outside / "secret.log", root / "out_file.log")
    os.symlink(root / "inner", root / "in_dir")
    return root, outside


def _write(fd: int, data: bytes) -> None:
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def test_relative_path_creates_dirs_and_appends(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    fd, real = open_confined(root, "job1/cycle_0.node3.log")
    _write(fd, b"a\n")
    fd, real2 = open_confined(root, "./job1//cycle_0.node3.log")
    _write(fd, b"b\n")
    assert real == real2 == str((root / "job1" / "cycle_0.node3.log").resolve())
    assert (root / "job1" / "cycle_0.node3.log").read_bytes() == b"a\nb\n"


def test_absolute_inside_root_is_allowed(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    fd, real = open_confined(root, str(root.resolve() / "abs.log"))
    os.close(fd)
    assert real == str(root.resolve() / "abs.log")


def test_symlinks_inside_root_are_refused_too(tree: tuple[Path, Path]) -> None:
    """The documented rule (docs/service.md, "Paths"): no symlink below the root is
    followed, whether it points inside or outside; nothing is created behind it."""
    root, _ = tree
    with pytest.raises(PathRejected) as info:
        open_confined(root, "in_dir/x.log")
    assert info.value.kind == "escape"
    assert "symlink 'in_dir'" in info.value.message
    assert list((root / "inner").iterdir()) == []


@pytest.mark.parametrize(
    "relpath, kind, message",
    [
        ("", "invalid", "empty"),
        (".", "invalid", "names the log root"),
        ("a/\x00b", "invalid", "NUL"),
        ("../outside/secret.log", "invalid", "'..'"),
        ("job/../../outside/x.log", "invalid", "'..'"),
        ("x" * 2000, "invalid", "longer than"),
        ("/etc/passwd", "invalid", "outside the log root"),
        ("out_dir/secret.log", "escape", "symlink 'out_dir'"),
        ("out_dir/new/deeper.log", "escape", "symlink 'out_dir'"),
        ("out_file.log", "escape", "symlink 'out_file.log'"),
        ("inner", "os", "Is a directory"),
    ],
)
def test_rejections(tree: tuple[Path, Path], relpath: str, kind: str, message: str) -> None:
    root, outside = tree
    with pytest.raises(PathRejected) as info:
        open_confined(root, relpath)
    assert info.value.kind == kind
    assert message in info.value.message
    # Nothing outside the root was created or changed.
    assert sorted(p.name for p in outside.iterdir()) == ["secret.log"]
    assert (outside / "secret.log").read_text() == "secret\n"


def test_absolute_path_lexically_outside_via_prefix(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    sibling = str(root.resolve()) + "2/x.log"  # same prefix, different directory
    with pytest.raises(PathRejected, match="outside the log root"):
        confine(root, sibling)


def test_fifo_does_not_hang(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    os.mkfifo(root / "pipe.log")
    with pytest.raises(PathRejected) as info:
        open_confined(root, "pipe.log")
    assert info.value.kind == "os"


def test_missing_root(tmp_path: Path) -> None:
    with pytest.raises(PathRejected, match="does not exist"):
        open_confined(tmp_path / "nope", "a.log")
