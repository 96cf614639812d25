"""Tests of `relaunch mcp` (attribution/mcp/) driven by the mcp SDK's real client over stdio and
streamable HTTP, the straggler tool included.

Fixtures: none of its own (the root conftest's are there if needed).
"""
