"""Tests of the restart agent (restart_agent/): the scanner, evidence, rank attribution, progress,
the pattern registry, the verdict policy (`decide` and its rule table), budgets, speed
machinery, straggler facts, and the hard cases of the verdict (test_agent_hard_cases.py).
Mostly in-process on text logs (tests/_agent_helpers.py); a few through the real
`relaunch analyze` CLI or `relaunch serve`.

Fixtures: none of its own; it uses the root conftest's `service_factory`.
"""
