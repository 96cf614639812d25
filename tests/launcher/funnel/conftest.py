"""Tests of the gRPC log funnel (launcher/funnel/): a real writer on loopback with node clients in their
own processes, and path confinement against a real directory tree.

Fixtures: none of its own (the root conftest's are there if needed).
"""
