"""The package table of docs/ARCHITECTURE.md, enforced over the real import graph.

Every `.py` file of the project's packages is parsed (ast, nothing imported), and every
`import x` / `from x import y` in it — module level or inside a function — that names
another package of the project is checked against `ALLOWED` below. A failure names the
file, the line, the import and the rule it breaks.

`ALLOWED` is the one place the rules live: a package may import the packages (or, where
a rule names modules, only those modules) listed for it, and nothing else of the project.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("restart_agent", "storage", "web", "attribution", "launcher", "relaunch_cli")

# package -> what of the project it may import: a package name allows all of it, a dotted
# name allows that module (and its submodules) only.
ALLOWED: dict[str, frozenset[str]] = {
    # the analysis core: pure, imports nothing else of the project
    "restart_agent": frozenset(),
    # the only SQL; may share the agent's model types, nothing more
    "storage": frozenset({"restart_agent.model"}),
    # the dashboard reads storage (and may show the agent's model types)
    "web": frozenset({"storage", "restart_agent"}),
    # the engine, the service and its adapters
    "attribution": frozenset({"restart_agent", "storage", "web"}),
    # the launcher: the agent, storage and the engine (embedded mode, small helpers)
    "launcher": frozenset({"restart_agent", "storage", "attribution"}),
    # the console script wires everything; nothing imports it back
    "relaunch_cli": frozenset(PACKAGES),
}

# Known breaks of the table, each with the work that removes it. An entry that no longer
# matches an import fails the test too, so the list only ever shrinks.
WAIVERS: dict[tuple[str, str], str] = {
    # issue 16 item 1: the Slack CLI flags move from attribution/notify/slack.py to
    # relaunch_cli/ (helper arch-core); then this import goes away.
    ("attribution/notify/slack.py", "relaunch_cli.errors"): "issue 16: Slack flags move",
}


@dataclass(frozen=True)
class Violation:
    file: str
    line: int
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: imports {self.imported} — {self.rule}"


def project_imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in `path` that names a project package.

    A relative import stays inside its own package (it cannot climb above the package
    root), so it is never a cross-package import."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from web import routes` imports web.routes: check the deepest name
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in PACKAGES:
                found.append((node.lineno, name))
    return found


def allowed(package: str, imported: str, table: dict[str, frozenset[str]]) -> bool:
    top = imported.split(".")[0]
    if top == package:
        return True
    for rule in table.get(package, frozenset()):
        if imported == rule or imported.startswith(rule + "."):
            return True
    return False


def rule_text(package: str, table: dict[str, frozenset[str]]) -> str:
    may = sorted(table.get(package, frozenset()))
    return (
        f"`{package}` may import only {', '.join(may)}"
        if may
        else (f"`{package}` may import no other package of the project")
    )


def check(root: Path, table: dict[str, frozenset[str]]) -> list[Violation]:
    violations: list[Violation] = []
    for package in table:
        base = root / package
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for line, imported in project_imports(path, package):
                if not allowed(package, imported, table):
                    violations.append(Violation(rel, line, imported, rule_text(package, table)))
    return violations


def _waived(v: Violation) -> bool:
    return any(v.file == f and (v.imported + ".").startswith(m + ".") for f, m in WAIVERS)


def test_the_project_keeps_the_package_table():
    violations = check(ROOT, ALLOWED)
    broken = [str(v) for v in violations if not _waived(v)]
    assert not broken, "import contract broken (docs/ARCHITECTURE.md):\n" + "\n".join(broken)


def test_every_waiver_still_matches_an_import():
    violations = check(ROOT, ALLOWED)
    stale = [
        f"{f} -> {m} ({why})"
        for (f, m), why in WAIVERS.items()
        if not any(v.file == f and (v.imported + ".").startswith(m + ".") for v in violations)
    ]
    assert not stale, "waiver no longer needed, remove it from WAIVERS:\n" + "\n".join(stale)


def test_every_package_of_the_project_has_a_rule():
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench"}
    assert on_disk == set(ALLOWED), (on_disk, set(ALLOWED))


@pytest.fixture()
def synthetic(tmp_path: Path) -> Path:
    """A tiny tree with one clean file and every kind of import that must be caught."""
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "restart_agent" / "ok.py").write_text(
        "import os\nfrom . import model\nfrom restart_agent.model import Verdict\n"
    )
    (tmp_path / "restart_agent" / "bad.py").write_text(
        "import json\n\n\ndef late():\n    from storage.repository import open_repository\n"
    )
    (tmp_path / "storage" / "bad.py").write_text(
        "from restart_agent.model import Verdict\nfrom restart_agent import scan_file\n"
    )
    (tmp_path / "web" / "bad.py").write_text("import launcher.agent\n")
    (tmp_path / "launcher" / "bad.py").write_text("from relaunch_cli import errors\n")
    return tmp_path


def test_the_check_catches_each_kind_of_violation(synthetic: Path):
    found = {(v.file, v.line, v.imported): v.rule for v in check(synthetic, ALLOWED)}
    assert set(found) == {
        # a function-level import
        ("restart_agent/bad.py", 5, "storage.repository.open_repository"),
        # storage may share the model types, not the rest of the agent
        ("storage/bad.py", 2, "restart_agent.scan_file"),
        # plain `import x.y`
        ("web/bad.py", 1, "launcher.agent"),
        # nothing below relaunch_cli imports it
        ("launcher/bad.py", 1, "relaunch_cli.errors"),
    }
    assert found[("restart_agent/bad.py", 5, "storage.repository.open_repository")] == (
        "`restart_agent` may import no other package of the project"
    )
    assert (
        "may import only attribution, restart_agent, storage"
        in found[("launcher/bad.py", 1, "relaunch_cli.errors")]
    )
    messages = [str(v) for v in check(synthetic, ALLOWED)]
    assert "launcher/bad.py:1: imports relaunch_cli.errors — `launcher` may import only" in (
        "\n".join(messages)
    )
