"""Tests of the optional LLM enrichment (restart_agent/llm/): the enrichment call against the loopback
OpenAI-compatible server (tests/_llm_server.py), the policy that lets a grounded answer only
shorten a workload bug's budget, and the streaming line reader behind the model's window.

Fixtures: none of its own; it uses the root conftest's `llm_server`, `key_file`.
"""
