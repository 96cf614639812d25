"""Tests of attribution/core/: the AttributionEngine on a real SQLite history, audit artifacts and
`relaunch audit`, the background queue, webhook export to a loopback receiver, and the
enrichment listener with the loopback LLM.

Fixtures: none of its own; it uses the root conftest's `repo`, `service_factory`, `llm_server`, `key_file`.
"""
