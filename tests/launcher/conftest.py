"""Tests of the launcher (`relaunch run`, launcher/) outside its rooms: end-to-end runs with real gloo
workers, the console and torchrun compatibility, facts and job truth, heartbeat and progress
guard, job lock and outcome codes, signals, NVRx flags and rank monitor, NUMA binding,
Flight Recorder dump triggers, the LLM flags on the embedded path. Real processes via
tests/_launcher_helpers.py; workers in tests/workers/.

Fixtures: none of its own; it uses the root conftest's `llm_server`, `key_file`.
"""
