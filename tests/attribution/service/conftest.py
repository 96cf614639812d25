"""Tests of the real `relaunch serve` (attribution/service/) over HTTP and a Unix socket: NVRx /logs, /v1,
uploads, multi-node gathering, node-health and Flight Recorder posts, coalescing, incremental
reads, confinement, resume after a kill, security answers, LLM enrichment after the verdict.
Started by the root's `service_factory` (tests/_service_helpers.py).

Fixtures: none of its own; it uses the root conftest's `service_factory`, `llm_server`, `key_file`.
"""
