"""Place flat tests/test_*.py files into their package folders, as tests/_moves.txt says.

tests/_moves.txt is the table of every move (one `old new` pair a line, relative to tests/;
`#` starts a comment). For each pair whose old file is still at tests/ root this script:

- `git mv`s it to its folder (creating the folder's `__init__.py` if missing; a folder's
  conftest.py is written by hand);
- fixes what the move breaks inside the file: `Path(__file__).resolve().parent.parent` and
  `.parents[1]` become `.parents[N]` for the new depth;
- rewrites references to the old path in the repository's text files: `tests/test_x.py`,
  `tests.test_x` (imports between test modules) and, for a renamed file, its bare name.

A test file at tests/ root that the table does not name is listed and the exit status is 1:
add its line to tests/_moves.txt (docs/TESTS.md says which folder takes what) and run again.
Run from anywhere: `python scripts/place_tests.py` (`--dry-run` prints the moves only).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
TABLE = TESTS / "_moves.txt"
# files that list the old paths on purpose
KEEP_OLD = {"tests/_moves.txt", "docs/TESTS.md"}
TEXT_SUFFIXES = {".py", ".md", ".sh", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".ini"}


def read_table() -> list[tuple[str, str]]:
    pairs = []
    for line in TABLE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            old, new = line.split()
            pairs.append((old, new))
    return pairs


def _depth_fix(text: str, new: str) -> str:
    depth = len(Path(new).parts)  # web/test_x.py -> 2: parents[2] is the repository root
    text = text.replace(
        "Path(__file__).resolve().parent.parent", f"Path(__file__).resolve().parents[{depth}]"
    )
    return text.replace(
        "Path(__file__).resolve().parents[1]", f"Path(__file__).resolve().parents[{depth}]"
    )


def _reference_fixes(pairs: list[tuple[str, str]]) -> list[tuple[re.Pattern[str], str]]:
    fixes = []
    for old, new in pairs:
        old_mod, new_mod = old.removesuffix(".py"), new.removesuffix(".py").replace("/", ".")
        fixes.append((re.compile(rf"\btests/{re.escape(old)}"), f"tests/{new}"))
        fixes.append((re.compile(rf"\btests\.{re.escape(old_mod)}\b"), f"tests.{new_mod}"))
        if Path(new).name != old:
            fixes.append((re.compile(rf"(?<![\w/]){re.escape(old)}"), Path(new).name))
    return fixes


def _text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True)
    return [
        ROOT / p
        for p in out.stdout.splitlines()
        if Path(p).suffix in TEXT_SUFFIXES
        and p not in KEEP_OLD
        and not p.startswith("tests/fixtures/")
        and (ROOT / p).is_file()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the moves, change nothing")
    args = parser.parse_args(argv)
    pairs = read_table()
    known = {old for old, _ in pairs}
    pending = [(old, new) for old, new in pairs if (TESTS / old).is_file()]
    for old, new in pending:
        print(f"tests/{old} -> tests/{new}")
        if args.dry_run:
            continue
        folder = TESTS / new
        for parent in reversed(folder.parents):
            if parent.is_relative_to(TESTS) and parent != TESTS:
                parent.mkdir(exist_ok=True)
                init = parent / "__init__.py"
                if not init.exists():
                    init.write_text("")
                    subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
        subprocess.run(["git", "mv", f"tests/{old}", f"tests/{new}"], cwd=ROOT, check=True)
        target = TESTS / new
        target.write_text(_depth_fix(target.read_text(), new))
    if pending and not args.dry_run:
        fixes = _reference_fixes(pairs)
        for path in _text_files():
            text = path.read_text()
            fixed = text
            for pattern, repl in fixes:
                fixed = pattern.sub(repl, fixed)
            if fixed != text:
                path.write_text(fixed)
    unplaced = sorted(p.name for p in TESTS.glob("test_*.py") if p.name not in known)
    if unplaced:
        print("not in tests/_moves.txt (add a line, then run again):", *unplaced, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
