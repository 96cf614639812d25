"""The worker-side API of `relaunch run` under its public name: `from relaunch import client`
or `from relaunch.client import heartbeat, section, report_progress` (docs/launcher.md).

It is `relaunch.launcher.client` itself (the same module object), so importing either
spelling says `hello` to the launcher once and shares one socket.
"""

import sys

from relaunch.launcher import client as _client
from relaunch.launcher.client import (
    heartbeat as heartbeat,
)
from relaunch.launcher.client import (
    report_progress as report_progress,
)
from relaunch.launcher.client import (
    section as section,
)
from relaunch.launcher.client import (
    start_heartbeat as start_heartbeat,
)
from relaunch.launcher.client import (
    stop_heartbeat as stop_heartbeat,
)
from relaunch.launcher.client import (
    straggler as straggler,
)

__all__ = list(_client.__all__)
sys.modules[__name__] = _client
