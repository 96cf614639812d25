"""Tests of Straggler detection on the launcher side (launcher/straggler/): scoring and section timing,
the exchange of reports through a real TCPStore, and whole 3-rank gloo jobs.

Fixtures: none of its own (the root conftest's are there if needed).
"""
