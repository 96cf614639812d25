"""relaunch.checkpoint: asynchronous, atomic, tiered checkpoints on torch.distributed.checkpoint.

Worker-side (docs/checkpointing.md): `CheckpointManager` saves with DCP's process-based
async writer, commits a checkpoint only once every rank's part is durable, replicates a
node-local tier to peer nodes and drains it to the persistent tier, and reports each
completed checkpoint to `relaunch run`. `latest_complete(dir)` finds the newest complete
checkpoint of a tier and never a torn one.
"""

from .layout import (
    CheckpointCorrupted,
    CheckpointError,
    CheckpointInfo,
    latest_complete,
    read_marker,
    verify,
)
from .manager import ENV_RESUME, CheckpointManager, load

__all__ = [
    "ENV_RESUME",
    "CheckpointCorrupted",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointManager",
    "latest_complete",
    "load",
    "read_marker",
    "verify",
]
