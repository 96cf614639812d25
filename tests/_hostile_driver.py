"""Run many `relaunch` invocations in one process, for the hostile-input fuzz suite.

`python -m tests._hostile_driver CASES.json RESULTS.json`: CASES is a list of
`{"argv": [...], "stdin": "<hex>" | null}`; for each, `relaunch_cli.main.main(argv)` runs with
stdout, stderr and stdin replaced, exactly as the `relaunch` entry point would run it.
RESULTS gets `{"rc", "stdout", "stderr", "crash"}` per case: `crash` is the traceback of an
exception that escaped `main()` (what a user would see as a traceback), else null.
"""

from __future__ import annotations

import io
import json
import sys
import traceback


def run_case(case: dict) -> dict:
    from relaunch.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    stdin = io.TextIOWrapper(io.BytesIO(bytes.fromhex(case.get("stdin") or "")))
    saved = sys.stdout, sys.stderr, sys.stdin
    sys.stdout, sys.stderr, sys.stdin = out, err, stdin
    crash = None
    try:
        rc = main(case["argv"])
    except SystemExit as exc:  # argparse usage errors exit like the real entry point
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - exactly what the fuzz suite looks for
        rc = 1
        crash = traceback.format_exc()
    finally:
        sys.stdout, sys.stderr, sys.stdin = saved
    return {"rc": rc, "stdout": out.getvalue()[:200_000], "stderr": err.getvalue(), "crash": crash}


def main() -> None:
    with open(sys.argv[1]) as fh:
        cases = json.load(fh)
    results = [run_case(c) for c in cases]
    with open(sys.argv[2], "w") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
