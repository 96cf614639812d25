"""gRPC log funnel: node launchers stream cycle log lines to one writer (the rendezvous host).

`FunnelServer(root, host, port).start() -> port` / `.stop()` is the writer; `FunnelSink(
address, relpath)` is the client-side `LineSink` (write_line/flush/close). Paths are
confined to the writer's root. See docs/node_health.md ("Log funnel").
"""

from relaunch.launcher.funnel.client import FunnelError, FunnelSink
from relaunch.launcher.funnel.paths import PathRejected, confine, open_confined
from relaunch.launcher.funnel.server import FunnelServer

__all__ = ["FunnelError", "FunnelServer", "FunnelSink", "PathRejected", "confine", "open_confined"]
