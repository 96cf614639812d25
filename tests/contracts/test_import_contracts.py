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

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "restart_agent",
    "storage",
    "web",
    "attribution",
    "launcher",
    "checkpoint",
    "relaunch_cli",
)

# (sub-)package -> what of the project its modules may import: a name allows that package
# or module and everything below it. A module follows the most specific key it lies in
# (`attribution.core.engine` follows `attribution.core`, not `attribution`), and may always
# import its own (sub-)package.
ALLOWED: dict[str, frozenset[str]] = {
    # the analysis core: pure, imports nothing else of the project
    "restart_agent": frozenset(),
    # the only SQL; may share the agent's model types, nothing more
    "storage": frozenset({"restart_agent.model"}),
    # the dashboard reads storage (and may show the agent's model types)
    "web": frozenset({"storage", "restart_agent"}),
    # modules directly in attribution/ (the sub-packages below have their own rules)
    "attribution": frozenset({"restart_agent", "storage", "web"}),
    # the engine, audit, export, enrichment listener, policy flags, text safety
    "attribution.core": frozenset({"restart_agent", "storage"}),
    # Flight Recorder analysis
    "attribution.fr": frozenset({"attribution.core", "restart_agent"}),
    # Slack alerts (an engine listener)
    "attribution.notify": frozenset({"attribution.core", "restart_agent"}),
    # adapters: the HTTP service and the MCP server
    "attribution.service": frozenset(
        {"attribution.core", "attribution.fr", "attribution.notify", "restart_agent", "storage"}
        | {"web"}
    ),
    "attribution.mcp": frozenset(
        {"attribution.core", "attribution.fr", "attribution.service", "restart_agent"}
        | {"storage", "web"}
    ),
    # the launcher: the agent, storage and the engine (embedded mode, small helpers)
    "launcher": frozenset({"restart_agent", "storage", "attribution.core"}),
    # the demo training job (a worker) checkpoints with relaunch.checkpoint
    "launcher.demo": frozenset({"checkpoint", "launcher.client"}),
    # worker-side checkpoints: only the worker client (to report completed checkpoints);
    # nothing imports it but relaunch_cli, the demo and tests
    "checkpoint": frozenset({"launcher.client"}),
    # the console script wires everything; nothing imports it back
    "relaunch_cli": frozenset(PACKAGES),
}

# Known breaks of the table, each with the work that removes it. An entry that no longer
# matches an import fails the test too, so the list only ever shrinks.
WAIVERS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Violation:
    file: str
    line: int
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: imports {self.imported} — {self.rule}"


def module_name(rel: Path) -> str:
    """`attribution/core/engine.py` -> `attribution.core.engine` (a package: its name)."""
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_imports(path: Path, module: str) -> list[tuple[int, str, bool]]:
    """(line, dotted name, absolute) of every import in `path` (the module `module`) that
    names a project package; relative imports are resolved against the module's package
    (and named as the table names them)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([base] if base else [])])
            # `from web import routes` imports web.routes: check the deepest name
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            canonical = table_name(name)
            if canonical.split(".")[0] in PACKAGES:
                relative = bool(getattr(node, "level", 0))
                found.append((node.lineno, canonical if relative else name, not relative))
    return found


def table_name(name: str) -> str:
    """The table's name for an imported module: `relaunch.storage.db` -> `storage.db`,
    `relaunch.cli.main` -> `relaunch_cli.main`; other names are returned as they are."""
    if not name.startswith("relaunch."):
        return name
    rest = name.removeprefix("relaunch.")
    if rest == "cli" or rest.startswith("cli."):
        return "relaunch_cli" + rest.removeprefix("cli")
    return rest


def old_spelling(name: str) -> bool:
    """An absolute import of a project package by its folder name (`import storage`),
    not by its installed name (`relaunch.storage`)."""
    return name.split(".")[0] in PACKAGES


def rule_for(module: str, table: dict[str, frozenset[str]]) -> str:
    """The most specific key of `table` that `module` lies in (a sub-package's own rule
    wins over its package's)."""
    keys = [k for k in table if module == k or module.startswith(k + ".")]
    return max(keys, key=len)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def allowed(rule: str, imported: str, table: dict[str, frozenset[str]]) -> bool:
    """A module under `rule` may import its own (sub-)package and what the rule lists."""
    if _within(imported, rule):
        return True
    return any(_within(imported, target) for target in table[rule])


def rule_text(rule: str, table: dict[str, frozenset[str]]) -> str:
    may = sorted(table[rule])
    if not may:
        return f"`{rule}` may import no other package of the project"
    return f"`{rule}` may import only {', '.join(may)}"


def check(root: Path, table: dict[str, frozenset[str]]) -> list[Violation]:
    violations: list[Violation] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            module = module_name(rel)
            rule = rule_for(module, table)
            for line, imported, absolute in project_imports(path, module):
                if absolute and old_spelling(imported):
                    text = "import the project's packages as relaunch.* (docs/ARCHITECTURE.md)"
                    violations.append(Violation(rel.as_posix(), line, imported, text))
                    continue
                imported = table_name(imported)
                if not allowed(rule, imported, table):
                    text = rule_text(rule, table)
                    violations.append(Violation(rel.as_posix(), line, imported, text))
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
    # relaunch/ is the namespace: links to the package folders, plus client.py and
    # __main__.py (checked by test_the_namespace_package_only_names_its_folders)
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench", "relaunch"}
    assert on_disk == set(PACKAGES) == {k.split(".")[0] for k in ALLOWED}
    subpackages = {f"attribution.{p.parent.name}" for p in ROOT.glob("attribution/*/__init__.py")}
    assert subpackages <= set(ALLOWED), subpackages - set(ALLOWED)


@pytest.fixture()
def synthetic(tmp_path: Path) -> Path:
    """A tiny tree with one clean file and every kind of import that must be caught."""
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "restart_agent" / "ok.py").write_text(
        "import os\nfrom . import model\nfrom relaunch.restart_agent.model import Verdict\n"
    )
    (tmp_path / "restart_agent" / "bad.py").write_text(
        "import json\n\n\ndef late():\n    from relaunch.storage.repository import open_repository\n"
    )
    (tmp_path / "storage" / "bad.py").write_text(
        "from relaunch.restart_agent.model import Verdict\nfrom relaunch.restart_agent import scan_file\n"
    )
    (tmp_path / "web" / "bad.py").write_text("import relaunch.launcher.agent\n")
    (tmp_path / "launcher" / "bad.py").write_text("from relaunch.cli import errors\n")
    (tmp_path / "launcher" / "ok.py").write_text(
        "from relaunch.attribution.core.engine import AttributionEngine\nfrom . import bad\n"
    )
    (tmp_path / "attribution" / "core").mkdir()
    (tmp_path / "attribution" / "core" / "__init__.py").write_text("from . import engine\n")
    (tmp_path / "attribution" / "core" / "bad.py").write_text(
        "from ..service import app\nfrom .. import web_glue\n"
    )
    # the folder name instead of the installed name: shadowed by a user's own `storage`
    (tmp_path / "web" / "old.py").write_text("import storage\n")
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
        # a sub-package's own rule, relative imports resolved: the core imports no adapter
        ("attribution/core/bad.py", 1, "attribution.service.app"),
        ("attribution/core/bad.py", 2, "attribution.web_glue"),
        # the old top-level spelling
        ("web/old.py", 1, "storage"),
    }
    assert found[("restart_agent/bad.py", 5, "storage.repository.open_repository")] == (
        "`restart_agent` may import no other package of the project"
    )
    assert (
        "may import only attribution.core, restart_agent, storage"
        in found[("launcher/bad.py", 1, "relaunch_cli.errors")]
    )
    assert found[("web/old.py", 1, "storage")].startswith(
        "import the project's packages as relaunch.*"
    )
    messages = [str(v) for v in check(synthetic, ALLOWED)]
    assert "launcher/bad.py:1: imports relaunch_cli.errors — `launcher` may import only" in (
        "\n".join(messages)
    )


def test_the_namespace_package_only_names_its_folders():
    """relaunch/ holds a link per package folder and the two modules of its own."""
    ns = ROOT / "relaunch"
    links = {p.name: p.resolve() for p in ns.iterdir() if p.is_symlink()}
    expected = {
        ("cli" if pkg == "relaunch_cli" else pkg): (ROOT / pkg).resolve() for pkg in PACKAGES
    }
    assert links == expected
    own = sorted(p.name for p in ns.iterdir() if not p.is_symlink() and p.suffix == ".py")
    assert own == ["__init__.py", "__main__.py", "client.py"]
    for name in own:
        # a from-import is named by its deepest name: drop the imported attribute
        modules = {n.rpartition(".")[0] for _, n, _ in project_imports(ns / name, "relaunch")}
        assert modules <= {"relaunch.launcher", "relaunch.launcher.client", "relaunch.cli.main"}
