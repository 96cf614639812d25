"""Worker of the rendezvous tests: one gloo all_reduce; prints which launcher (TEST_NODE)
ran which rank. On the node named by FAIL_NODE it exits 7 in cycle 0 right after joining
the process group (a node-specific failure), so its peers fail in the all_reduce."""

import os
import sys

import torch
import torch.distributed as dist

from launcher.client import heartbeat

heartbeat()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
node, cycle = os.environ["TEST_NODE"], os.environ.get("RELAUNCH_CYCLE", "?")
print(f"node {node} runs rank {rank} of {world} in cycle {cycle}", flush=True)
if node == os.environ.get("FAIL_NODE") and cycle == "0":
    sys.exit(7)
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == world, t
dist.destroy_process_group()
