"""Checks of `relaunch run`'s settings that need more than the option's type: done before
anything starts (no worker, no rendezvous), each failure one line (`ConfigError`).

`check_settings(settings)`: the history database URL of the embedded mode (scheme,
dialect, driver, SQLite folder: what `storage.db.make_engine` needs, without connecting),
the audit folder and its HMAC key file, the rendezvous backend, endpoint and `--rdzv-conf`. `launcher.config`
checks each option's own value; this module checks what they point at.
"""

from __future__ import annotations

from pathlib import Path

from relaunch.launcher.config import ConfigError, RunSettings
from relaunch.launcher.config.values import rdzv_conf_numbers

RDZV_BACKENDS = ("c10d", "static", "etcd", "etcd-v2")


def check_db_url(url: str) -> None:
    """The embedded history database can be opened with this URL (not connected yet)."""
    from relaunch.storage.db import StorageError, make_engine

    try:
        engine = make_engine(url)
    except StorageError as exc:
        hint = ""
        if url.startswith("postgres://"):
            hint = " (SQLAlchemy spells it postgresql+psycopg2://USER:PASS@HOST/DB)"
        raise ConfigError(f"--ft-db-url {url!r}: {exc}{hint}") from None
    engine.dispose()


def check_audit_key() -> None:
    """The audit artifacts' HMAC key ($RELAUNCH_AUDIT_HMAC_KEY_FILE), when set, is usable:
    otherwise every artifact of the job would be written unsigned."""
    from relaunch.attribution.core.audit import HMAC_KEY_ENV, KeyFileError, key_from_env

    try:
        key_from_env()
    except KeyFileError as exc:
        raise ConfigError(f"${HMAC_KEY_ENV}: {exc}") from None


def attribution_token(settings: RunSettings) -> str | None:
    """The bearer token for an http/unix attribution endpoint (`--ft-attribution-token-file`),
    None without one; an unusable file is a ConfigError."""
    from relaunch.restart_agent.secret_file import TokenFileError, read_token_file

    path = settings.ft_attribution_token_file
    if not path or settings.ft_attribution_endpoint in ("embedded", "off"):
        return None
    try:
        return read_token_file(path, "--ft-attribution-token-file")
    except TokenFileError as exc:
        raise ConfigError(str(exc)) from None


def check_endpoint(text: str) -> None:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--rdzv-endpoint {text!r}: expected HOST:PORT")


def check_settings(settings: RunSettings) -> None:
    """Raise ConfigError (one line) for the first setting that cannot work."""
    if settings.rdzv_backend not in RDZV_BACKENDS:
        raise ConfigError(
            f"--rdzv-backend {settings.rdzv_backend!r}: expected one of {', '.join(RDZV_BACKENDS)}"
        )
    check_endpoint(settings.rdzv_endpoint)
    if settings.rdzv_backend == "static" and settings.rdzv_endpoint.endswith(":0"):
        raise ConfigError("--rdzv-backend static needs --rdzv-endpoint HOST:PORT with a port")
    from torch.distributed.run import _parse_rendezvous_config

    try:
        rdzv_conf_numbers(_parse_rendezvous_config(settings.rdzv_conf))
    except ValueError as exc:
        raise ConfigError(f"--rdzv-conf {settings.rdzv_conf!r}: {exc}") from None
    if settings.ft_attribution_endpoint != "embedded":
        attribution_token(settings)
        return
    check_db_url(settings.db_url())
    check_audit_key()
    audit = Path(settings.audit_dir())
    try:
        audit.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--ft-audit-dir {str(audit)!r}: {exc.strerror}") from None
