"""Tests of Whole-product flows: `relaunch demo` end to end, and several `relaunch run` launchers on
loopback forming one job (one verdict on every node, Flight Recorder dumps and the log funnel
flowing by themselves). Expensive: few and decisive.

Fixtures: none of its own (the root conftest's are there if needed).
"""
