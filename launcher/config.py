"""Settings of `relaunch run`: the option table, defaults, YAML file, precedence and checks.

Precedence: built-in default < `--ft-cfg-path` YAML < command line. An option given on
the command line wins; an option omitted there keeps the YAML value. YAML keys are the
option names with `_` or `-` (`ft_heartbeat_timeout`, `max-restarts`), optionally
nested under `fault_tolerance:`; NVRx spellings are accepted through the alias table
`launcher/config_aliases.yaml`. Unknown keys and bad values are a one-line error.
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

STOP_ACTIONS = ("log", "no-restart")
GPU_HEALTH = ("on", "off", "auto")


class ConfigError(ValueError):
    """A bad option value or config file; the CLI turns it into a one-line error."""


def _positive_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be >= 1")
    return value


def _nnodes(text: str) -> str:
    parts = str(text).split(":")
    if len(parts) not in (1, 2) or not all(p.strip().isdigit() for p in parts):
        raise ValueError("must be N or MIN:MAX")
    lo, hi = int(parts[0]), int(parts[-1])
    if not 0 < lo <= hi:
        raise ValueError("must satisfy 0 < MIN <= MAX")
    return str(text)


def _endpoint(text: str) -> str:
    text = str(text).strip()
    if text in ("embedded", "off") or text.startswith(("http://", "https://")):
        return text
    if text.startswith("unix://") and len(text) > len("unix://"):
        return text
    raise ValueError("must be embedded, off, http://HOST:PORT or unix:///PATH")


def _bool(text: str) -> bool:
    low = str(text).strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _section_timeouts(text: str) -> dict[str, float]:
    """`setup:900,step:120` -> {"setup": 900.0, "step": 120.0}."""
    out: dict[str, float] = {}
    for part in str(text).split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition(":")
        if not sep or not name.strip():
            raise ValueError("expected NAME:SECONDS[,NAME:SECONDS...]")
        out[name.strip()] = _positive_float(value)
    return out


def _optional_float(text: str) -> float | None:
    if str(text).strip().lower() in ("none", "off", "0", ""):
        return None
    return _positive_float(text)


@dataclass(frozen=True)
class Option:
    flag: str
    dest: str
    type: Callable[[str], Any]
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    is_flag: bool = False  # store_true on the command line
    aliases: tuple[str, ...] = ()  # other spellings on the command line (NVRx's)


OPTIONS: tuple[Option, ...] = (
    Option("--nproc-per-node", "nproc_per_node", _positive_int, 1, "workers per node"),
    Option("--nnodes", "nnodes", _nnodes, "1", "number of nodes, N or MIN:MAX"),
    Option("--node-rank", "node_rank", _non_negative_int, 0, "rank of this node (static rdzv)"),
    Option(
        "--rdzv-backend", "rdzv_backend", str, "c10d", "rendezvous backend (c10d, static, etcd)"
    ),
    Option("--rdzv-endpoint", "rdzv_endpoint", str, "", "rendezvous endpoint HOST:PORT"),
    Option("--rdzv-id", "rdzv_id", str, "", "rendezvous id (defaults to the job id)"),
    Option("--rdzv-conf", "rdzv_conf", str, "", "extra rendezvous config k1=v1,k2=v2"),
    Option("--job-id", "job_id", str, "", "job id: names the log folder and the history"),
    Option("--max-restarts", "max_restarts", _non_negative_int, 3, "job-level restart budget"),
    Option(
        "--monitor-interval", "monitor_interval", _positive_float, 0.1, "seconds between checks"
    ),
    Option("--log-dir", "log_dir", str, "relaunch-logs", "root of the per-cycle logs"),
    Option(
        "--ft-attribution-endpoint",
        "ft_attribution_endpoint",
        _endpoint,
        "embedded",
        "embedded | http://HOST:PORT | unix:///PATH | off",
    ),
    Option(
        "--ft-attribution-stop-action",
        "ft_attribution_stop_action",
        str,
        "no-restart",
        "what a STOP verdict does",
        choices=STOP_ACTIONS,
    ),
    Option(
        "--ft-db-url",
        "ft_db_url",
        str,
        "",
        "database of the embedded history (default sqlite:///$RELAUNCH_HOME/relaunch.db, "
        "or <log-dir>/relaunch.db when RELAUNCH_HOME is unset)",
    ),
    Option("--ft-audit-dir", "ft_audit_dir", str, "", "audit artifacts (default <log-dir>/audit)"),
    Option(
        "--ft-heartbeat-timeout",
        "ft_heartbeat_timeout",
        _optional_float,
        60.0,
        "a rank silent this long after a heartbeat is hung (off: none)",
        aliases=("--ft-rank-heartbeat-timeout",),
    ),
    Option(
        "--ft-initial-heartbeat-timeout",
        "ft_initial_heartbeat_timeout",
        _optional_float,
        300.0,
        "allowed silence before a rank's first heartbeat (initialisation)",
        aliases=("--ft-initial-rank-heartbeat-timeout",),
    ),
    Option(
        "--ft-rank-section-timeouts",
        "ft_rank_section_timeouts",
        _section_timeouts,
        {},
        "NAME:SECONDS,...: a rank inside section NAME longer than SECONDS is hung",
    ),
    Option(
        "--workers-stop-timeout",
        "workers_stop_timeout",
        _positive_float,
        15.0,
        "seconds between SIGTERM and SIGKILL when stopping workers",
    ),
    Option(
        "--ft-node-health-check-endpoint",
        "ft_node_health_check_endpoint",
        str,
        "",
        "unix:///PATH of a node health gRPC service, checked before each rendezvous",
    ),
    Option("--ft-gpu-health", "ft_gpu_health", str, "auto", "GPU preflight", choices=GPU_HEALTH),
    Option(
        "--ft-log-funnel",
        "ft_log_funnel",
        str,
        "",
        "HOST:PORT or unix:/PATH of a log funnel writer (root: <log-dir>/<job-id>): cycle "
        "log lines go there instead of local files",
    ),
    Option(
        "--ft-keep-rank-logs",
        "ft_keep_rank_logs",
        _bool,
        False,
        "keep the raw per-rank spool files next to the cycle logs",
        is_flag=True,
    ),
)

_BY_DEST = {o.dest: o for o in OPTIONS}


@dataclass
class RunSettings:
    """Resolved settings of one `relaunch run`."""

    script: str = ""
    script_args: list[str] = field(default_factory=list)
    nproc_per_node: int = 1
    nnodes: str = "1"
    node_rank: int = 0
    rdzv_backend: str = "c10d"
    rdzv_endpoint: str = ""
    rdzv_id: str = ""
    rdzv_conf: str = ""
    job_id: str = ""
    max_restarts: int = 3
    monitor_interval: float = 0.1
    log_dir: str = "relaunch-logs"
    ft_attribution_endpoint: str = "embedded"
    ft_attribution_stop_action: str = "no-restart"
    ft_db_url: str = ""
    ft_audit_dir: str = ""
    ft_heartbeat_timeout: float | None = 60.0
    ft_initial_heartbeat_timeout: float | None = 300.0
    ft_rank_section_timeouts: dict[str, float] = field(default_factory=dict)
    workers_stop_timeout: float = 15.0
    ft_node_health_check_endpoint: str = ""
    ft_gpu_health: str = "auto"
    ft_log_funnel: str = ""
    ft_keep_rank_logs: bool = False
    llm_config: Any | None = None
    sources: dict[str, str] = field(default_factory=dict)  # dest -> default|yaml|cli

    @property
    def min_nodes(self) -> int:
        return int(self.nnodes.split(":")[0])

    @property
    def max_nodes(self) -> int:
        return int(self.nnodes.split(":")[-1])

    @property
    def job_dir(self) -> Path:
        return Path(self.log_dir) / self.job_id

    def db_url(self) -> str:
        if self.ft_db_url:
            return self.ft_db_url
        home = os.environ.get("RELAUNCH_HOME")
        base = Path(home) if home else Path(self.log_dir)
        return f"sqlite:///{(base / 'relaunch.db').resolve()}"

    def audit_dir(self) -> str:
        return self.ft_audit_dir or str((Path(self.log_dir) / "audit").resolve())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every option with `default=SUPPRESS`, so omitted options stay absent."""
    for o in OPTIONS:
        flags = [o.flag, *o.aliases]
        underscore = "--" + o.flag[2:].replace("-", "_")
        if underscore != o.flag:
            flags.append(underscore)  # torchrun also accepts --nproc_per_node
        if o.is_flag:
            parser.add_argument(
                *flags, dest=o.dest, action="store_true", default=argparse.SUPPRESS, help=o.help
            )
            continue
        parser.add_argument(
            *flags,
            dest=o.dest,
            type=_argparse_type(o),
            choices=o.choices,
            default=argparse.SUPPRESS,
            help=f"{o.help} (default: {o.default!r})",
            metavar=o.metavar,
        )


def _argparse_type(o: Option) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return o.type(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None

    convert.__name__ = o.dest
    return convert


def _aliases() -> dict[str, str]:
    text = resources.files("launcher").joinpath("config_aliases.yaml").read_text("utf-8")
    data = yaml.safe_load(text) or {}
    return {str(k): str(v) for k, v in (data.get("aliases") or {}).items()}


def _yaml_text(value: Any, opt: Option) -> str:
    """YAML 1.1 reads `off`/`on` as booleans; give them back their words."""
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    if isinstance(value, bool):
        if opt.type is _bool:
            return str(value).lower()
        return "on" if value else "off"
    return str(value)


def load_yaml(path: str) -> dict[str, Any]:
    """Read `--ft-cfg-path`; returns {dest: converted value}. Raises ConfigError."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of option names to values")
    if isinstance(data.get("fault_tolerance"), dict):
        nested = data.pop("fault_tolerance")
        data = {**data, **nested}
    aliases = _aliases()
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).lstrip("-").replace("-", "_")
        name = aliases.get(name, name)
        if name not in _BY_DEST:
            raise ConfigError(f"config file {path}: unknown option {key!r}")
        opt = _BY_DEST[name]
        if value is None and name in ("ft_heartbeat_timeout", "ft_initial_heartbeat_timeout"):
            out[name] = None
            continue
        try:
            converted = opt.type(_yaml_text(value, opt))
        except ValueError as exc:
            raise ConfigError(f"config file {path}: {key}: {value!r}: {exc}") from None
        if opt.choices and converted not in opt.choices:
            raise ConfigError(f"config file {path}: {key}: {value!r} is not one of {opt.choices}")
        out[name] = converted
    return out


def resolve(cli: dict[str, Any], yaml_path: str | None = None) -> RunSettings:
    """Merge defaults < YAML < CLI into a checked `RunSettings`."""
    settings = RunSettings()
    names = {f.name for f in fields(RunSettings)}
    for o in OPTIONS:
        settings.sources[o.dest] = "default"
    if yaml_path:
        for name, value in load_yaml(yaml_path).items():
            setattr(settings, name, value)
            settings.sources[name] = "yaml"
    for name, value in cli.items():
        if name in names:
            setattr(settings, name, value)
            if name in _BY_DEST:
                settings.sources[name] = "cli"
    if not settings.job_id:
        settings.job_id = settings.rdzv_id or f"job-{uuid.uuid4().hex[:12]}"
    if not settings.rdzv_id:
        settings.rdzv_id = settings.job_id
    if "/" in settings.job_id or settings.job_id in (".", ".."):
        raise ConfigError(f"--job-id {settings.job_id!r}: must not contain '/'")
    if settings.max_nodes > 1 and not settings.rdzv_endpoint:
        raise ConfigError("--rdzv-endpoint HOST:PORT is required when --nnodes allows > 1 node")
    if settings.ft_log_funnel and (
        ":" not in settings.ft_log_funnel or settings.ft_log_funnel.endswith(":")
    ):
        raise ConfigError(
            f"--ft-log-funnel {settings.ft_log_funnel!r}: expected HOST:PORT or unix:/PATH"
        )
    if settings.ft_node_health_check_endpoint:
        from launcher.health.external import normalize_endpoint

        try:
            normalize_endpoint(settings.ft_node_health_check_endpoint)
        except ValueError as exc:
            raise ConfigError(f"--ft-node-health-check-endpoint: {exc}") from None
    if not settings.rdzv_endpoint:
        settings.rdzv_endpoint = "127.0.0.1:0"  # single node: the agent hosts the store
    return settings
