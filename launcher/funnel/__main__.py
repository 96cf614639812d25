"""`python -m launcher.funnel serve|send`: run a funnel writer, or pipe stdin into one.

`serve --root DIR [--host H] [--port P]` prints `LISTENING host:port` and serves until
SIGTERM or SIGINT, then prints its stats as JSON. `send --address A --path REL
[--node-id N]` streams stdin lines and prints the writer's summary as JSON. Errors are
one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from relaunch.launcher.funnel.client import FunnelError, FunnelSink
from relaunch.launcher.funnel.server import FunnelServer


def _serve(ns: argparse.Namespace) -> int:
    server = FunnelServer(Path(ns.root), ns.host, ns.port, prefix_node=ns.prefix_node)
    try:
        server.start()
    except Exception as exc:  # noqa: BLE001
        print(f"funnel: cannot start: {exc}", file=sys.stderr)
        return 2
    print(f"LISTENING {server.address}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    while not done.wait(0.5):
        pass
    server.stop()
    print(json.dumps(server.stats()), flush=True)
    return 0


def _send(ns: argparse.Namespace) -> int:
    try:
        sink = FunnelSink(ns.address, ns.path, node_id=ns.node_id, batch_lines=ns.batch_lines)
        for raw in sys.stdin.buffer:
            sink.write_bytes(raw[:-1] if raw.endswith(b"\n") else raw)
        sink.close()
    except (FunnelError, ValueError) as exc:
        print(f"funnel: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"node_id": sink.node_id, "sent": sink.lines_sent, **(sink.summary or {})}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.funnel", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run a funnel writer")
    s.add_argument("--root", required=True)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--prefix-node", action="store_true", help="prefix each line with [node]")
    c = sub.add_parser("send", help="stream stdin lines to a writer")
    c.add_argument("--address", required=True)
    c.add_argument("--path", required=True)
    c.add_argument("--node-id")
    c.add_argument("--batch-lines", type=int, default=1024)
    ns = parser.parse_args(argv)
    return _serve(ns) if ns.cmd == "serve" else _send(ns)


if __name__ == "__main__":
    sys.exit(main())
