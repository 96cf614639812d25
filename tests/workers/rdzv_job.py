"""Worker of the rendezvous tests: one gloo all_reduce; prints which launcher (TEST_NODE)
ran which rank. On the node named by FAIL_NODE it exits 7 in cycle 0 right after joining
the process group (a node-specific failure), so its peers fail in the all_reduce. On the
node named by HOLD_NODE it writes its pid to HOLD_NODE.pid in PID_DIR and waits (the test
then kills that node's launcher and this worker)."""

import os
import sys
import time

import torch
import torch.distributed as dist

from relaunch.launcher.client import heartbeat

heartbeat()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
node, cycle = os.environ["TEST_NODE"], os.environ.get("RELAUNCH_CYCLE", "?")
print(f"node {node} runs rank {rank} of {world} in cycle {cycle}", flush=True)
if node == os.environ.get("FAIL_NODE") and cycle == "0":
    sys.exit(7)
if node == os.environ.get("HOLD_NODE") and cycle == "0":
    pid_file = os.path.join(os.environ["PID_DIR"], f"{node}.pid")
    with open(pid_file + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    while True:
        time.sleep(1)
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == world, t
dist.destroy_process_group()
