"""The per-job secret of the rendezvous store and what it signs.

torch's `TCPStore` has no authentication: whoever reaches its port may read and write any
key. relaunch therefore (a) keeps its rendezvous keys under a prefix derived from a per-job
secret (the store has no operation that lists keys, so a process without the secret cannot
address them) and (b) signs every value it writes with HMAC-SHA256 over key and value; a
reader refuses a value whose signature does not verify (`ForgedValue`).

The secret comes from, in this order: `--ft-job-secret-file PATH` (first line, at least
16 bytes), the environment variable `RELAUNCH_JOB_SECRET` (a scheduler sets it for every
node of the job), or, for a single-node job, 32 random bytes the launcher generates (nobody
else needs it). A multi-node job without one is refused at start (exit 2) unless
`--ft-insecure-store` lets it run unauthenticated, with a warning.
The variable is removed from the launcher's environment once read, so its workers (which
never talk to the rendezvous store) do not inherit it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

SECRET_ENV = "RELAUNCH_JOB_SECRET"
MIN_SECRET = 16  # bytes
MAX_SECRET = 4096
SIG_LEN = 32  # hex characters of the HMAC kept in front of a value (128 bits)


class ForgedValue(ValueError):
    """A value under the job's keys that was not written by a holder of its secret."""


def load_secret(path: str | None, single_node: bool) -> tuple[bytes | None, str]:
    """(secret, where it came from); ValueError with a one-line reason for a bad file or
    variable. None (and "none") for a multi-node job that was given none."""
    if path:
        from relaunch.launcher.safe_read import read_small_text

        try:
            text = read_small_text(path, limit=MAX_SECRET * 2)
        except OSError as exc:
            raise ValueError(f"--ft-job-secret-file {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ValueError(f"--ft-job-secret-file {path}: not UTF-8 text") from None
        value = text.split("\n", 1)[0].strip()
        _check(value, f"--ft-job-secret-file {path}")
        os.environ.pop(SECRET_ENV, None)
        return value.encode(), "file"
    raw = os.environ.pop(SECRET_ENV, None)
    if raw is not None and raw.strip():
        _check(raw.strip(), SECRET_ENV)
        return raw.strip().encode(), "env"
    if single_node:
        return secrets.token_bytes(32), "generated"
    return None, "none"


def _check(value: str, where: str) -> None:
    if len(value.encode()) < MIN_SECRET:
        raise ValueError(f"{where}: the job secret must be at least {MIN_SECRET} bytes")
    if len(value.encode()) > MAX_SECRET:
        raise ValueError(f"{where}: the job secret must be at most {MAX_SECRET} bytes")


def key_prefix(secret: bytes | None, run_id: str) -> str:
    """Where the run's keys live: `relaunch/rdzv/<run_id>` plus, with a secret, a tag
    only its holders can compute."""
    base = f"relaunch/rdzv/{run_id}"
    if secret is None:
        return base
    tag = hmac.new(secret, b"prefix\0" + run_id.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{base}/{tag}"


def sign(secret: bytes | None, key: str, value: str) -> str:
    """`value` with its signature in front (deterministic: compare_set can expect it)."""
    if secret is None:
        return value
    mac = hmac.new(secret, key.encode() + b"\0" + value.encode(), hashlib.sha256)
    return mac.hexdigest()[:SIG_LEN] + ":" + value


def verify(secret: bytes | None, key: str, stored: bytes) -> str:
    """The value of a signed `stored`; ForgedValue when the signature does not verify."""
    text = stored.decode(errors="replace")
    if secret is None:
        return text
    mac, sep, value = text.partition(":")
    if not sep or not hmac.compare_digest(sign(secret, key, value)[:SIG_LEN], mac):
        raise ForgedValue(f"the rendezvous store holds an unsigned or forged value at {key!r}")
    return value
