"""Overhead of `with straggler.section(...)` against a bare `with nullcontext()` loop.

Both loops run in this script, interleaved, on the same body (an empty block), so the
difference is what timing a section costs: two `perf_counter_ns` calls, one list append and
the end-of-interval check. The timer reports to a no-op sender with a 1 s interval (a
summary is built and "sent" once per second, as in training). Also measured: the disabled
timer (no launcher: a shared no-op context) and the cost of one report of 64 sections.

    python bench/straggler_bench.py [--sections 200000] [--repeat 7]

Prints ns per section for each loop and the ratios against the bare loop.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._timing import timed_median
from relaunch.launcher.straggler.worker import StragglerTimer


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sections", type=int, default=200_000, help="sections per loop")
    p.add_argument("--repeat", type=int, default=7, help="loops per variant (median kept)")
    a = p.parse_args()
    n = a.sections
    sent: list[int] = []
    on = StragglerTimer(lambda kind, **f: sent.append(1), interval_s=1.0)
    off = StragglerTimer(lambda kind, **f: None, interval_s=0.0)

    def bare() -> None:
        for _ in range(n):
            with nullcontext():
                pass

    def timed() -> None:
        section = on.section
        for _ in range(n):
            with section("fwd"):
                pass

    def disabled() -> None:
        section = off.section
        for _ in range(n):
            with section("fwd"):
                pass

    results: dict[str, list[float]] = {"bare": [], "timed": [], "disabled": []}
    for _ in range(a.repeat):  # interleaved, so machine load hits every variant alike
        results["bare"].append(timed_median(bare, 1))
        results["timed"].append(timed_median(timed, 1))
        results["disabled"].append(timed_median(disabled, 1))
    med = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
    ns = {k: v / n * 1e9 for k, v in med.items()}

    big = StragglerTimer(lambda kind, **f: None, interval_s=3600.0)
    for i in range(64):
        for _ in range(200):
            big._record_sample(f"s{i}", 1000 + i)

    def one_report() -> None:
        for i in range(64):
            big._durations[f"s{i}"] = [1000 + i] * 200
        big.report()

    report_s = timed_median(one_report, 21)

    print(f"sections per loop: {n}, loops per variant: {a.repeat} (median)")
    print(f"bare `with nullcontext()`:       {ns['bare']:8.1f} ns/section")
    print(f"`with straggler.section()` on:  {ns['timed']:8.1f} ns/section")
    print(f"`with straggler.section()` off: {ns['disabled']:8.1f} ns/section")
    print(f"ratio on / bare:   {ns['timed'] / ns['bare']:.2f}")
    print(f"ratio off / bare:  {ns['disabled'] / ns['bare']:.2f}")
    print(f"added per section (on - bare): {ns['timed'] - ns['bare']:.1f} ns")
    print(f"one report of 64 sections x 200 samples: {report_s * 1e6:.0f} us (once per interval)")
    print(f"reports sent during the 'on' loops (1 s interval): {len(sent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
