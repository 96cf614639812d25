"""Tests of the attribution service's packages (attribution/), one sub-folder per package: core/,
fr/, mcp/, notify/, service/.

Fixtures: none of its own (the root conftest's are there if needed).
"""
