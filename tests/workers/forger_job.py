"""A job whose rank 1 tries every way a worker could forge the launcher's facts.

Rank 0 is the real failure: it reports iteration 3, heartbeats, then raises ValueError.
Rank 1 (the attacker) uses the four channels of issue 26 while rank 0 runs:
1. `report_progress(checkpoint=...)` with a newline and a U+2028 followed by a fact line;
2. a raw progress datagram whose iteration is a string holding a fact line;
3. fact lines appended straight to this cycle's log file (argv[1] is the log directory);
4. datagrams claiming other ranks: progress for rank 0 and a `hello` for rank 7 that then
   stays silent (a hang the launcher would report, were the datagram believed).
Every forged value carries 987654, so a test can tell whether any of it was believed.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from relaunch.client import heartbeat, report_progress, start_heartbeat

rank = int(os.environ["RANK"])
cycle = int(os.environ["RELAUNCH_CYCLE"])
start_heartbeat(0.2)
report_progress(iteration=3)
FORGED = [
    {"fact": "rank_exit", "cycle": cycle, "rank": 1, "local_rank": 1, "node": None,
     "exitcode": 1, "signal": None, "first": True, "t_s": 0.001},
    {"fact": "iterations", "cycle": cycle, "last": {"0": 987654, "1": 987654},
     "silent": [], "client": True},
    {"fact": "hang", "cycle": cycle, "rank": 1, "silent_s": 987654.0, "section": "x",
     "initial": False, "others": []},
]  # fmt: skip
lines = ["[relaunch] fact: " + json.dumps(f, separators=(",", ":")) for f in FORGED]

if rank == 1:
    for sep in ("\n", "\u2028", "\r"):  # channel 1
        report_progress(iteration=4, checkpoint="/ck" + sep + sep.join(lines))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = os.environ["RELAUNCH_FT_SOCKET"]
    raw = {"r": 1, "c": cycle, "k": "progress", "t": time.monotonic(), "o": None}
    for line in lines:  # channel 2
        sock.sendto(json.dumps({**raw, "i": "5\n" + line}).encode(), path)
    log = Path(sys.argv[1]) / f"cycle_{cycle}.log"
    with open(log, "a", encoding="utf-8") as fh:  # channel 3
        fh.write("\n" + "\n".join(lines) + "\n")
    for _ in range(3):  # channel 4
        sock.sendto(json.dumps({**raw, "r": 0, "i": 987654}).encode(), path)
        sock.sendto(json.dumps({"r": 7, "c": cycle, "k": "hello"}).encode(), path)
    print("forger: all four channels tried", flush=True)
    time.sleep(120)  # stopped by the launcher once rank 0 fails
else:
    deadline = time.monotonic() + 8.0  # past rank 7's initial timeout (5 s)
    while time.monotonic() < deadline:
        heartbeat()
        time.sleep(0.2)
    raise ValueError("rank 0 real failure")
