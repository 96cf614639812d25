"""The `--ft-llm-*` / `--llm` options shared by `relaunch run`, `analyze` and `serve`.

`add_arguments(parser)` adds `--ft-llm-base-url`, `--ft-llm-model`, `--ft-llm-api-key-file`,
`--ft-llm-timeout` (seconds, default 60) and `--ft-llm-context-tokens` (default 8192).
For `relaunch analyze` it also adds the `--llm` switch: there enrichment runs only when
`--llm` is given. `analyze=None` (the default) infers that from the parser's prog name,
so `add_arguments(parser)` does the right thing in every subcommand.

`config_from_args(args)` returns an `LLMConfig` when the flags configure one, else None
(off). A half configuration (a URL without a model, `--llm` without a URL, a key file that
does not exist) is a `UserError`, reported before anything runs.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from relaunch.cli.errors import UserError

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_CONTEXT_TOKENS = 8192
MAX_TIMEOUT_S = 86400.0  # one day: longer is a typo, and overflows thread timeouts when huge
MAX_CONTEXT_TOKENS = 100_000_000


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < value <= MAX_TIMEOUT_S:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"must be a positive number of seconds up to {MAX_TIMEOUT_S:g}, got {text[:20]!r}"
        )
    return value


def _context_tokens(text: str) -> int:
    try:
        value = int(text) if len(text) <= 20 else -1
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens, got {text!r}") from None
    if not 1024 <= value <= MAX_CONTEXT_TOKENS:
        raise argparse.ArgumentTypeError(
            f"must be at least 1024 tokens and at most {MAX_CONTEXT_TOKENS}, got {text[:20]}"
        )
    return value


def add_arguments(
    parser: argparse.ArgumentParser, *, analyze: bool | None = None, nvrx: bool = False
) -> None:
    """Add the LLM flags to `parser`; `--llm` too when it is `relaunch analyze`'s; with
    `nvrx`, NVRx's spellings too (`--ft-attribution-llm-base-url`, ... for `relaunch run`)."""

    def names(flag: str) -> list[str]:
        if not nvrx:
            return [flag]
        tail = flag.removeprefix("--ft-")
        return [flag, f"--ft-attribution-{tail}", f"--ft_attribution_{tail.replace('-', '_')}"]

    if analyze is None:
        analyze = (parser.prog or "").split()[-1:] == ["analyze"]
    group = parser.add_argument_group(
        "LLM enrichment (optional; off unless configured; never delays a verdict)"
    )
    if analyze:
        group.add_argument(
            "--llm",
            action="store_true",
            help="also ask the configured LLM to explain the verdict (needs --ft-llm-base-url "
            "and --ft-llm-model)",
        )
    group.add_argument(
        *names("--ft-llm-base-url"),
        metavar="URL",
        default=None,
        help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1",
    )
    group.add_argument(
        *names("--ft-llm-model"), metavar="NAME", default=None, help="model name to ask"
    )
    group.add_argument(
        *names("--ft-llm-api-key-file"),
        metavar="PATH",
        default=None,
        help="file whose first line is the API key (default: $OPENAI_API_KEY, else no key)",
    )
    group.add_argument(
        "--ft-llm-timeout",
        metavar="SECONDS",
        type=_positive_float,
        default=DEFAULT_TIMEOUT_S,
        help=f"hard deadline of one enrichment, retries included (default {DEFAULT_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--ft-llm-context-tokens",
        metavar="N",
        type=_context_tokens,
        default=DEFAULT_CONTEXT_TOKENS,
        help=f"the model's context size; the prompt budget derives from it (default "
        f"{DEFAULT_CONTEXT_TOKENS})",
    )


def config_from_args(args: argparse.Namespace) -> Any | None:
    """Return an `restart_agent.llm.LLMConfig` when the flags configure one, else None."""
    base_url = getattr(args, "ft_llm_base_url", None)
    model = getattr(args, "ft_llm_model", None)
    key_file = getattr(args, "ft_llm_api_key_file", None)
    switch = getattr(args, "llm", None)  # only `relaunch analyze` has it
    if switch is False:
        return None
    if switch is True and not base_url:
        raise UserError("--llm needs --ft-llm-base-url URL and --ft-llm-model NAME")
    if not base_url:
        if model or key_file:
            raise UserError("--ft-llm-model/--ft-llm-api-key-file need --ft-llm-base-url URL")
        return None
    if not model:
        raise UserError("--ft-llm-base-url needs --ft-llm-model NAME")
    from relaunch.restart_agent.llm import LLMConfig, LLMConfigError

    try:
        config = LLMConfig(
            base_url=base_url,
            model=model,
            api_key_file=os.path.expanduser(key_file) if key_file else None,
            timeout_s=float(getattr(args, "ft_llm_timeout", DEFAULT_TIMEOUT_S)),
            context_tokens=int(getattr(args, "ft_llm_context_tokens", DEFAULT_CONTEXT_TOKENS)),
        )
        config.check_key_file()
    except LLMConfigError as exc:
        raise UserError(str(exc)) from None
    return config
