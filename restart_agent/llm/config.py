"""LLM enrichment settings (`LLMConfig`) and reading the API key without ever exposing it.

The config holds the *path* of the key file, never the key: the key is read at call time
by `load_api_key()` and lives only in the local variables of the client call. That keeps
it out of reprs, pickles, logs, audit artifacts and error messages by construction.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from relaunch.restart_agent import safe_files

MAX_KEY_BYTES = 4096

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_CONTEXT_TOKENS = 8192
MIN_CONTEXT_TOKENS = 1024
# Used when neither a key file nor OPENAI_API_KEY is given: local OpenAI-compatible
# servers (vLLM, llama.cpp, Ollama) accept any bearer token.
NO_KEY = "relaunch-no-key"


class LLMConfigError(ValueError):
    """A bad LLM setting (URL, model, timeout, key file). The message never contains a key."""


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to ask an OpenAI-compatible chat-completions endpoint.

    `timeout_s` is the hard deadline of one enrichment, retries included.
    `context_tokens` is the model's context size; the prompt budget is derived from it
    (see `restart_agent.llm.prompt`).
    """

    base_url: str
    model: str
    api_key_file: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    max_retries: int = 2  # after the first attempt: 5xx, 429, connection errors
    temperature: float = 0.0

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url or "")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise LLMConfigError(
                f"LLM base URL must be http(s)://host[:port][/path], got {_safe_url(self.base_url)!r}"
            )
        if not self.model or not self.model.strip():
            raise LLMConfigError("LLM model name is empty")
        if not (self.timeout_s > 0):
            raise LLMConfigError(f"LLM timeout must be > 0 seconds, got {self.timeout_s}")
        if self.context_tokens < MIN_CONTEXT_TOKENS:
            raise LLMConfigError(
                f"LLM context size must be >= {MIN_CONTEXT_TOKENS} tokens, got {self.context_tokens}"
            )
        if self.max_retries < 0:
            raise LLMConfigError(f"LLM max retries must be >= 0, got {self.max_retries}")

    def check_key_file(self) -> None:
        """Raise LLMConfigError if a key file is configured but unreadable or empty."""
        self.load_api_key()

    def load_api_key(self) -> str:
        """The API key: the key file's first non-empty line, else $OPENAI_API_KEY, else a dummy."""
        if self.api_key_file is None:
            return os.environ.get("OPENAI_API_KEY") or NO_KEY
        path = Path(self.api_key_file)
        try:
            data = safe_files.read_bounded(path, MAX_KEY_BYTES)  # refused before reading
            text = data.decode("utf-8", errors="strict")
        except safe_files.TooLarge:
            raise LLMConfigError(
                f"LLM API key file is larger than {MAX_KEY_BYTES} bytes: {path}"
            ) from None
        except safe_files.NotRegularFile:
            raise LLMConfigError(f"LLM API key file is not a regular file: {path}") from None
        except FileNotFoundError:
            raise LLMConfigError(f"LLM API key file not found: {path}") from None
        except IsADirectoryError:
            raise LLMConfigError(f"LLM API key file is a directory: {path}") from None
        except PermissionError:
            raise LLMConfigError(f"LLM API key file is not readable: {path}") from None
        except UnicodeDecodeError:
            raise LLMConfigError(f"LLM API key file is not UTF-8 text: {path}") from None
        except OSError as exc:
            raise LLMConfigError(
                f"LLM API key file cannot be read: {path} ({exc.strerror})"
            ) from None
        for line in text.splitlines():
            if line.strip():
                return line.strip()
        raise LLMConfigError(f"LLM API key file is empty: {path}")

    def describe(self) -> dict[str, object]:
        """Settings safe to log or store (no key, URL without user:password)."""
        return {
            "base_url": _safe_url(self.base_url),
            "model": self.model,
            "api_key_file": self.api_key_file,
            "timeout_s": self.timeout_s,
            "context_tokens": self.context_tokens,
        }


def _safe_url(url: str | None) -> str:
    """`url` with any user:password@ part removed."""
    if not url:
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return parts._replace(netloc=host).geturl()
