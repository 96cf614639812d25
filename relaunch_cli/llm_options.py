"""The `--ft-llm-*` / `--llm` options shared by `relaunch run`, `analyze` and `serve`.

Placeholder until the LLM enrichment lands: adds nothing and returns no config (LLM off).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the LLM flags to `parser` (none yet)."""


def config_from_args(args: argparse.Namespace) -> Any | None:
    """Return an `restart_agent.llm.LLMConfig` when the flags configure one, else None."""
    return None
