"""Tests of the barrier rendezvous (launcher/rdzv/): rank assignment, the barrier on a real c10d
TCPStore, config-time checks, the store's trust boundary and accept filter, the workers' store,
hot spares and segments, store operation counts, and what every launcher does when the store
host dies or is unreachable (test_rdzv_store_failures.py). Several `relaunch run` on loopback
(tests/_rdzv_helpers.py).

Fixtures: none of its own (the root conftest's are there if needed).
"""
