"""Tests of relaunch.checkpoint (checkpoint/) through real `relaunch run` jobs: the save/restore story,
the fsspec persistent tier, and replicas with K = 2 (workers tests/workers/ckpt_*.py).

Fixtures: none of its own (the root conftest's are there if needed).
"""
