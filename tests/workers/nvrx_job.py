"""A training script instrumented with NVRx 0.7.0's RankMonitorClient, used unchanged.

Per cycle (TORCHELASTIC_RESTART_COUNT): cycle 0, rank 1 stops sending heartbeats (a hang);
cycle 1, rank 0 hangs inside the section "step" while its heartbeats stop too; cycle 2 every
rank heartbeats, opens and closes "step", shuts monitoring down and exits 0.
"""

from __future__ import annotations

import os
import time

from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient


def main() -> None:
    rank = int(os.environ["RANK"])
    cycle = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    client = RankMonitorClient()
    client.init_workload_monitoring()
    cfg = client.cfg
    sections = dict(cfg.rank_section_timeouts)
    print(f"nvrx cfg: heartbeat={cfg.rank_heartbeat_timeout} sections={sections}", flush=True)
    for _ in range(3):
        client.send_heartbeat()
    if cycle == 0 and rank == 1:
        print("rank 1 stops its heartbeats", flush=True)
        time.sleep(3600)
    client.start_section("step")
    if cycle == 1 and rank == 0:
        print("rank 0 hangs inside 'step'", flush=True)
        time.sleep(3600)
    client.end_section("step")
    client.send_heartbeat()
    client.shutdown_workload_monitoring()
    print(f"rank {rank} done in cycle {cycle}", flush=True)


if __name__ == "__main__":
    main()
