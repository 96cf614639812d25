"""Tests of the `relaunch` commands as a user runs them (relaunch_cli/): `analyze` (files, stdin, gzip,
scenarios over the log corpus, cycle allocation), numeric bounds of every option, `fr`, the
LLM flags, and `serve`'s flag errors. Real subprocesses (tests/_cli_helpers.py).

Fixtures: none of its own; it uses the root conftest's `llm_server`, `key_file`.
"""
