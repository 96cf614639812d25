"""docs/ARCHITECTURE.md matches the code: every module, folder or file it names exists,
and every name it places in a module (`pkg.module.name`, "`name` ... (`pkg/module.py`)")
is defined there.

What the document may name, and what is checked (by reading files, nothing imported):
- a path with a slash (`storage/repository.py`, `launcher/demo/`, `relaunch/__init__.py`):
  the file or folder exists in the repository;
- a bare file name (`routes_nvrx.py`): some file of the project's packages has that name;
- a dotted name starting with a project package (`restart_agent.model`,
  `relaunch.launcher.client`, `web.routes.router`): the longest prefix that is a module or
  package exists, and the next component, if any, is defined at its top level (a def,
  class, assignment or import) or is a submodule;
- a sentence that puts functions in a file: each backticked call-like name of that
  sentence (`job_state_counts`) is defined in the file it names.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
# package name as written in the docs (with or without `relaunch.`) -> folder
PACKAGES = {
    "restart_agent": "restart_agent",
    "storage": "storage",
    "web": "web",
    "attribution": "attribution",
    "launcher": "launcher",
    "checkpoint": "checkpoint",
    "relaunch_cli": "relaunch_cli",
    "cli": "relaunch_cli",
}
# backticked tokens that name something outside the repository on purpose
OUTSIDE = {"../shared/", "/"}

_TICKS = re.compile(r"`([^`\n]+)`")


def _tokens() -> list[str]:
    return sorted(set(_TICKS.findall(DOC.read_text())))


def _paths() -> list[str]:
    return [
        t
        for t in _tokens()
        if t not in OUTSIDE
        and re.fullmatch(r"[\w./-]+", t)
        and ("/" in t or t.endswith(".py"))
        and not t.startswith(("http", "/"))
    ]


def _dotted() -> list[str]:
    out = []
    for t in _tokens():
        if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+", t):
            continue
        parts = t.split(".")
        if parts[0] == "relaunch":
            parts = parts[1:]
        if parts and parts[0] in PACKAGES:
            out.append(t)
    return out


@cache
def _top_level_names(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _defined_anywhere(path: Path) -> frozenset[str]:
    """Top-level names plus methods of top-level classes."""
    tree = ast.parse(path.read_text())
    names = set(_top_level_names(path))
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.update(
                n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            )
    return frozenset(names)


def _module_file(folder: Path) -> Path | None:
    if folder.with_suffix(".py").is_file():
        return folder.with_suffix(".py")
    if (folder / "__init__.py").is_file():
        return folder / "__init__.py"
    return None


def test_the_document_names_modules_at_all() -> None:
    """The extraction below finds what it should (a parser that finds nothing passes
    every check)."""
    assert "storage/repository.py" in _paths()
    assert "restart_agent.model" in _dotted()
    assert len(_paths()) >= 10 and len(_dotted()) >= 10


@pytest.mark.parametrize("name", _paths())
def test_every_named_path_exists(name: str) -> None:
    if "/" in name:
        assert (ROOT / name).exists(), f"docs/ARCHITECTURE.md names {name}; it does not exist"
        return
    found = [p for pkg in set(PACKAGES.values()) for p in (ROOT / pkg).rglob(name)]
    assert found, f"docs/ARCHITECTURE.md names {name}; no file of the packages has that name"


@pytest.mark.parametrize("name", _dotted())
def test_every_named_module_exists(name: str) -> None:
    parts = name.split(".")
    if parts[0] == "relaunch":
        parts = parts[1:]
    folder = ROOT / PACKAGES[parts[0]]
    rest = parts[1:]
    while rest and _module_file(folder / rest[0]) is not None:
        folder = folder / rest[0]
        rest = rest[1:]
    module = _module_file(folder)
    assert module is not None, f"{name}: no module {folder.relative_to(ROOT)}"
    if rest:
        assert rest[0] in _top_level_names(module), (
            f"docs/ARCHITECTURE.md names {name}; {module.relative_to(ROOT)} defines no {rest[0]}"
        )


def _placements() -> list[tuple[str, str]]:
    """(name, file) for each sentence of the form "... `name`, `name` (`pkg/file.py`)":
    the backticked identifiers of the clause right before a parenthesised file."""
    text = re.sub(r"\s+", " ", DOC.read_text())
    out = []
    for m in re.finditer(r"([^.;:()]*?)\([^()`]*`([\w/]+\.py)`\)", text):
        clause, file = m.group(1), m.group(2)
        for name in re.findall(r"`([a-z_][a-z0-9_]*)`", clause):
            out.append((name, file))
    return out


@pytest.mark.parametrize(("name", "file"), _placements())
def test_names_placed_in_a_file_are_defined_there(name: str, file: str) -> None:
    path = ROOT / file
    assert path.is_file(), file
    assert name in _defined_anywhere(path), (
        f"docs/ARCHITECTURE.md places {name} in {file}; it is not defined there"
    )
