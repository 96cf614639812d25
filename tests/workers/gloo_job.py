"""A 2-rank gloo job for the launcher tests; its failure mode is chosen by --mode.

ok: a few all_reduce steps, heartbeats and progress, exit 0.
crash_once: rank 1 SIGKILLs itself mid-run in cycle 0; later cycles succeed.
hang_once: rank 1 stops heart-beating (sleeps, outside any section) in cycle 0; rank 0 then
  heart-beats once more and waits in section 'step'; later cycles succeed.
bug: rank 0 hits the same deterministic bug at step 2 of every cycle (no checkpoint).
fail_always: rank 1 exits with code 7 in every cycle (no analysis-specific text).
slow_section_once: rank 0 stays in section 'ckpt' in cycle 0; later cycles succeed.
sleep: both ranks sleep 120 s (for signal tests).
noisy: rank 0 prints a partial line, a huge line and many lines; exit 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from relaunch.launcher.client import heartbeat, report_progress, section


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="ok")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep per step")
    p.add_argument("--marker", default="")
    a = p.parse_args()
    cycle = int(os.environ.get("RELAUNCH_CYCLE", os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    heartbeat()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(
        f"hello from rank {rank} of {dist.get_world_size()} in cycle {cycle} pid {os.getpid()}",
        flush=True,
    )
    if a.mode == "fail_always" and rank == 1:
        sys.exit(7)
    if a.mode == "noisy" and rank == 0:
        sys.stdout.write("partial ")
        sys.stdout.flush()
        time.sleep(0.2)
        sys.stdout.write("line completed\n")
        sys.stdout.write("H" * (3 << 20) + "\n")
        for i in range(200):
            print(f"noise {i}")
        sys.stdout.flush()
    if a.mode == "sleep":
        time.sleep(120)
    t = torch.ones(4)
    for step in range(a.steps):
        if a.step_sleep:
            time.sleep(a.step_sleep)
        if a.mode == "bug" and rank == 0 and step == 2:
            cfg = {"lr": 0.1}
            print(cfg["warmup_steps"])  # KeyError at the same step of every cycle: a workload bug
        with section("step"):
            dist.all_reduce(t)
        heartbeat()
        report_progress(iteration=step)
        print(f"step {step} value {t[0].item():.0f}", flush=True)
        if step == 1 and cycle == 0 and rank == 1:
            if a.mode == "crash_once":
                os.kill(os.getpid(), signal.SIGKILL)
            if a.mode == "hang_once":
                dist.send(torch.zeros(1), dst=0)  # after its last message: rank 0 may go on
                time.sleep(3600)
        if step == 1 and cycle == 0 and rank == 0 and a.mode == "slow_section_once":
            with section("ckpt"):
                time.sleep(3600)
        if step == 1 and cycle == 0 and rank == 0 and a.mode == "hang_once":
            # rank 0 speaks again only after rank 1 said its last word, so rank 1 is the
            # rank silent longest whatever the scheduling (rank 0 then waits in step 2)
            dist.recv(torch.zeros(1), src=1)
            heartbeat()
    if a.marker and rank == 0:
        with open(a.marker, "a") as fh:
            fh.write(f"done cycle {cycle}\n")
    dist.destroy_process_group()
    if a.mode == "noisy" and rank == 0:
        sys.stdout.write("no newline at the end")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
