"""A tiny worker for the progress guard and timeout tests; its behaviour is chosen by --mode.

No torch.distributed: each rank talks to the launcher through `relaunch.client` only.

stuck: every cycle reports iteration 5 and exits 1 (no progress after the first cycle).
advance: every cycle reports iteration 10*(cycle+1) and exits 1 (progress every cycle).
silent: never imports the client; exits 1 every cycle.
rank0_reports: global rank 0 reports iteration 5 and exits 1; the other ranks never use
  the client and exit 1 (a job where only rank 0 reports progress).
out_of_section: heart-beats from a thread, runs one section, reports iteration 1, then
  blocks forever outside any section.
calibrate_then_hang: cycle 0 of the job id: waits 1 s, heart-beats 5 times 0.3 s apart,
  runs section 'step' for 0.2 s, reports iteration 1 and exits 1. Later cycles heart-beat
  once and block forever inside section 'wait'.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time


def block_forever() -> None:
    threading.Event().wait()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", required=True)
    mode = p.parse_args().mode
    cycle = int(os.environ.get("RELAUNCH_CYCLE", "-1"))
    if mode == "silent" or (mode == "rank0_reports" and os.environ.get("RANK") != "0"):
        print(f"silent worker, cycle {cycle}", flush=True)
        return 1

    from relaunch.launcher.client import heartbeat, report_progress, section, start_heartbeat

    if mode in ("stuck", "rank0_reports"):
        report_progress(iteration=5)
        return 1
    if mode == "advance":
        report_progress(iteration=10 * (cycle + 1))
        return 1
    if mode == "out_of_section":
        start_heartbeat(interval=0.2)
        with section("step"):
            heartbeat()
        report_progress(iteration=1)
        print("now blocking outside any section", flush=True)
        block_forever()
    if mode == "calibrate_then_hang":
        if cycle == 0:
            time.sleep(1.0)
            heartbeat()
            for _ in range(4):
                time.sleep(0.3)
                heartbeat()
            with section("step"):
                time.sleep(0.2)
            report_progress(iteration=1)
            return 1
        heartbeat()
        with section("wait"):
            print("blocking inside section 'wait'", flush=True)
            block_forever()
    print(f"unknown mode {mode}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
