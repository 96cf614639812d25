"""Settings of `relaunch run`: the option table, defaults, precedence and checks.

Precedence: built-in default < `--ft-cfg-path` YAML (`launcher.config.yaml_file`) < command
line. An option given on the command line wins; an option omitted there keeps the YAML
value. Values are converted by `launcher.config.values`; a bad one is a one-line error.
torchrun's and NVRx's spellings map onto the same settings here (`--standalone`,
`--master-addr/--master-port`, `--ft-max-no-progress-cycles`, ...), and the settings give
the worker command (torchrun's `-m`, `--no-python`, `--run-path`), the console spec
(`--tee`, `--redirects`, `--local-ranks-filter`) and the verdict policy
(`attribution.core.policy_config`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from relaunch.attribution.core.policy_config import POLICY_OPTIONS, build_policy
from relaunch.launcher.config.option import Option
from relaunch.launcher.config.values import (
    ConfigError,
    boolean,
    endpoint_spec,
    nnodes_spec,
    non_negative_int,
    nproc_spec,
    nvrx_no_progress_cycles,
    optional_float,
    port_number,
    positive_float,
    positive_int,
    prefix_template,
    ranks_filter_spec,
    rdzv_impl,
    restart_policy,
    section_timeouts,
    segment_size,
    std_spec,
)
from relaunch.launcher.config.yaml_file import ignored_flags
from relaunch.launcher.config.yaml_file import load_yaml as _load_yaml
from relaunch.launcher.straggler.scores import report_interval_value, threshold_value
from relaunch.launcher.timeouts_auto import DEFAULT_SAFETY_FACTOR, safety_factor_value
from relaunch.storage import job_id as job_id_rule
from relaunch.storage.location import describe, history_url

STOP_ACTIONS = ("log", "no-restart")
# NVRx's default: node health checked every 5 s while workers run, when any check applies
DEFAULT_HEALTH_INTERVAL_S = 5.0
GPU_HEALTH = ("on", "off", "auto")
START_METHODS = ("spawn", "fork", "forkserver")
STATIC_MASTER_PORT = 29500  # torchrun's default port of the static rendezvous


def _policy_options() -> tuple[Option, ...]:
    out = []
    for p in POLICY_OPTIONS:
        out.append(Option(f"--ft-{p.name}", p.dest, p.parse, p.default(), p.help))
    out.append(
        Option(
            "--ft-max-no-progress-cycles",
            "ft_max_no_progress_cycles",
            nvrx_no_progress_cycles,
            None,
            "NVRx spelling of --ft-max-no-progress-restarts (0 or -1: no ceiling)",
        )
    )
    return tuple(out)


OPTIONS: tuple[Option, ...] = (
    Option(
        "--nproc-per-node", "nproc_per_node", nproc_spec, 1, "workers per node (N, cpu, gpu, auto)"
    ),
    Option("--nnodes", "nnodes", nnodes_spec, "1", "number of nodes, N or MIN:MAX"),
    Option("--node-rank", "node_rank", non_negative_int, 0, "rank of this node (static rdzv)"),
    Option(
        "--standalone",
        "standalone",
        boolean,
        False,
        "single node: a local c10d rendezvous (port: --master-port, else a free one)",
        is_flag=True,
    ),
    Option(
        "--master-addr",
        "master_addr",
        str,
        "127.0.0.1",
        "rendezvous host when --rdzv-endpoint is not given (as NVRx)",
    ),
    Option(
        "--master-port",
        "master_port",
        port_number,
        None,
        "rendezvous port when --rdzv-endpoint is not given (static default 29500)",
    ),
    Option("--local-addr", "local_addr", str, "", "address of this node (default: its FQDN)"),
    Option(
        "--rdzv-backend", "rdzv_backend", str, "c10d", "rendezvous backend (c10d, static, etcd)"
    ),
    Option("--rdzv-endpoint", "rdzv_endpoint", str, "", "rendezvous endpoint HOST:PORT"),
    Option("--rdzv-id", "rdzv_id", str, "", "rendezvous id (defaults to the job id)"),
    Option("--rdzv-conf", "rdzv_conf", str, "", "extra rendezvous config k1=v1,k2=v2"),
    Option("--job-id", "job_id", str, "", "job id: names the log folder and the history"),
    Option("--max-restarts", "max_restarts", non_negative_int, 3, "job-level restart budget"),
    Option("--monitor-interval", "monitor_interval", positive_float, 0.1, "seconds between checks"),
    Option("--log-dir", "log_dir", str, "relaunch-logs", "root of the per-cycle logs"),
    Option(
        "--start-method",
        "start_method",
        str,
        "spawn",
        "how workers are started",
        choices=START_METHODS,
    ),
    Option("--role", "role", str, "default", "role of the workers (shown in the tee prefix)"),
    Option(
        "--module",
        "module",
        boolean,
        False,
        "run the script as a Python module (python -m)",
        is_flag=True,
        aliases=("-m",),
    ),
    Option(
        "--no-python",
        "no_python",
        boolean,
        False,
        "run the script as an executable, without python",
        is_flag=True,
    ),
    Option(
        "--run-path",
        "run_path",
        boolean,
        False,
        "run the script with runpy.run_path in the worker's interpreter",
        is_flag=True,
    ),
    Option(
        "--redirects",
        "redirects",
        std_spec,
        "0",
        "worker streams kept off the console, cycle log only (0-3 or LOCAL_RANK:0-3,...)",
        aliases=("-r",),
    ),
    Option(
        "--tee",
        "tee",
        std_spec,
        "0",
        "worker streams on the console with a rank prefix (0-3 or LOCAL_RANK:0-3,...)",
        aliases=("-t",),
    ),
    Option(
        "--local-ranks-filter",
        "local_ranks_filter",
        ranks_filter_spec,
        "",
        "only these local ranks on the console, e.g. 0 or 0,1 (cycle logs keep all)",
    ),
    Option(
        "--log-line-prefix-template",
        "log_line_prefix_template",
        prefix_template,
        "",
        "console prefix of teed lines, with ${role_name}, ${rank}, ${local_rank}",
    ),
    Option(
        "--ft-attribution-endpoint",
        "ft_attribution_endpoint",
        endpoint_spec,
        "embedded",
        "embedded | http://HOST:PORT | unix:///PATH | off",
    ),
    Option(
        "--ft-attribution-token-file",
        "ft_attribution_token_file",
        str,
        "",
        "file with the bearer token of a `relaunch serve --token-file` endpoint (http/unix)",
        metavar="PATH",
    ),
    Option(
        "--ft-attribution-stop-action",
        "ft_attribution_stop_action",
        str,
        "log",
        "what a STOP verdict does: log (record and print it) or no-restart (end the job)",
        choices=STOP_ACTIONS,
    ),
    Option(
        "--ft-db-url",
        "ft_db_url",
        str,
        "",
        "database of the embedded history (default: $RELAUNCH_DB, else "
        "sqlite:///$RELAUNCH_HOME/relaunch.db; RELAUNCH_HOME defaults to ~/.relaunch: the "
        "history relaunch serve, analyze and mcp read by default)",
    ),
    Option("--ft-audit-dir", "ft_audit_dir", str, "", "audit artifacts (default <log-dir>/audit)"),
    Option(
        "--ft-heartbeat-timeout",
        "ft_heartbeat_timeout",
        optional_float,
        60.0,
        "a rank silent this long after a heartbeat is hung (off: none)",
        aliases=("--ft-rank-heartbeat-timeout",),
    ),
    Option(
        "--ft-initial-heartbeat-timeout",
        "ft_initial_heartbeat_timeout",
        optional_float,
        300.0,
        "allowed silence before a rank's first heartbeat (initialisation)",
        aliases=("--ft-initial-rank-heartbeat-timeout",),
    ),
    Option(
        "--ft-rank-section-timeouts",
        "ft_rank_section_timeouts",
        section_timeouts,
        {},
        "NAME:SECONDS,...: a rank inside section NAME longer than SECONDS is hung",
    ),
    # -- out-of-section and calculated timeouts, progress guard (docs/launcher.md) -----
    Option(
        "--ft-rank-out-of-section-timeout",
        "ft_rank_out_of_section_timeout",
        optional_float,
        None,
        "a rank outside every section this long (since its last section or progress report) "
        "is hung (off: none)",
    ),
    Option(
        "--ft-calculate-timeouts",
        "ft_calculate_timeouts",
        boolean,
        False,
        "calculate the heartbeat, section and out-of-section timeouts from observed intervals",
        is_flag=True,
    ),
    Option(
        "--ft-safety-factor",
        "ft_safety_factor",
        safety_factor_value,
        DEFAULT_SAFETY_FACTOR,
        "calculated timeout = this factor x the longest interval observed",
    ),
    Option(
        "--ft-min-progress-iterations",
        "ft_min_progress_iterations",
        positive_int,
        1,
        "a cycle made progress when the best reported iteration rose by at least this",
    ),
    Option(
        "--workers-stop-timeout",
        "workers_stop_timeout",
        positive_float,
        15.0,
        "seconds between SIGTERM and SIGKILL when stopping workers",
        aliases=("--shutdown-timeout",),  # torchrun's name
    ),
    Option(
        "--ft-node-health-check-endpoint",
        "ft_node_health_check_endpoint",
        str,
        "",
        "unix:///PATH of a node health gRPC service, checked before each rendezvous",
    ),
    Option("--ft-gpu-health", "ft_gpu_health", str, "auto", "GPU preflight", choices=GPU_HEALTH),
    # -- node health during the run, exclusion file, NUMA (docs/launcher.md) -----------
    Option(
        "--ft-node-health-check-interval",
        "ft_node_health_check_interval",
        positive_float,
        DEFAULT_HEALTH_INTERVAL_S,
        "seconds between node health checks while workers run (0: only before rendezvous; "
        "no thread when no check applies)",
    ),
    Option(
        "--ft-enable-nic-healthcheck",
        "ft_enable_nic_healthcheck",
        boolean,
        False,
        "watch NIC link state while workers run (default links: those up at start)",
        is_flag=True,
    ),
    Option(
        "--ft-nic-interfaces",
        "ft_nic_interfaces",
        str,
        "",
        "NICs to watch: eth0,mlx5_0,mlx5_1:1 (implies --ft-enable-nic-healthcheck)",
    ),
    Option(
        "--ft-storage-healthcheck-path",
        "ft_storage_healthcheck_path",
        str,
        "",
        "directory that must take a small write+fsync+read while workers run",
        metavar="DIR",
        aliases=("--ft-storage-health-check-path",),  # NVRx's spelling
    ),
    Option(
        "--ft-storage-healthcheck-timeout",
        "ft_storage_healthcheck_timeout",
        positive_float,
        10.0,
        "seconds the storage probe may take before the node is unhealthy",
    ),
    Option(
        "--ft-node-health-check-groups",
        "ft_node_health_check_groups",
        str,
        "prolog,epilog,logs,gpu",
        "check groups sent to the node health service (nvhcd)",
    ),
    Option(
        "--ft-exclusion-file",
        "ft_exclusion_file",
        str,
        "",
        "shared JSON file of excluded nodes, read before each rendezvous",
        metavar="PATH",
    ),
    Option(
        "--ft-node-id", "ft_node_id", str, "", "this node's id in the exclusion file (hostname)"
    ),
    Option(
        "--numa-binding",
        "numa_binding",
        str,
        "",
        "bind each worker's CPUs (torchrun's values)",
        choices=("node", "socket", "exclusive", "core-complex"),
    ),
    # -- end node health during the run --------------------------------------------------
    Option(
        "--ft-log-funnel",
        "ft_log_funnel",
        str,
        "",
        "HOST:PORT or unix:/PATH of a log funnel writer (root: <log-dir>/<job-id>): cycle "
        "log lines go there instead of local files; auto: group rank 0's launcher starts "
        "the writer and tells the other nodes its address through the rendezvous store",
    ),
    # -- straggler detection (docs/straggler.md) --------------------------------------
    Option(
        "--ft-straggler-report-interval",
        "ft_straggler_report_interval",
        report_interval_value,
        60.0,
        "seconds between the ranks' section timing reports (0: straggler detection off)",
    ),
    Option(
        "--ft-straggler-threshold",
        "ft_straggler_threshold",
        threshold_value,
        0.7,
        "a rank whose relative score stays below this (0 < T <= 1) is a straggler",
    ),
    # -- end straggler detection ------------------------------------------------------
    Option(
        "--ft-keep-rank-logs",
        "ft_keep_rank_logs",
        boolean,
        False,
        "keep the raw per-rank spool files next to the cycle logs",
        is_flag=True,
    ),
    Option(
        "--ft-rdzv-impl",
        "ft_rdzv_impl",
        rdzv_impl,
        "barrier",
        "rendezvous of --rdzv-backend c10d: barrier (hot spares, segments) or c10d "
        "(torch's dynamic rendezvous, the fallback)",
    ),
    Option(
        "--ft-segment",
        "ft_segment",
        segment_size,
        None,
        "segment-aware hot spares: only whole NVLink segments of N nodes become active",
        metavar="N",
    ),
    Option(
        "--ft-use-infra-group-rank",
        "ft_use_infra_group_rank",
        boolean,
        False,
        "order nodes by the scheduler's rank (SLURM_PROCID, SLURM_NODEID, GROUP_RANK)",
        is_flag=True,
    ),
    Option(
        "--ft-job-secret-file",
        "ft_job_secret_file",
        str,
        "",
        "file whose first line is the job's secret (same on every node; else "
        "RELAUNCH_JOB_SECRET; a single-node job generates one): signs the rendezvous store",
        metavar="PATH",
    ),
    Option(
        "--ft-insecure-store",
        "ft_insecure_store",
        boolean,
        False,
        "let a multi-node job run without a job secret (unauthenticated rendezvous store): "
        "only on a trusted test network",
        is_flag=True,
    ),
    Option(
        "--ft-restart-policy",
        "ft_restart_policy",
        restart_policy,
        "any-failed",
        "(deprecated, as in NVRx) only any-failed",
    ),
    *_policy_options(),
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
    ft_attribution_stop_action: str = "log"
    ft_attribution_token_file: str = ""
    ft_db_url: str = ""
    ft_audit_dir: str = ""
    ft_heartbeat_timeout: float | None = 60.0
    ft_initial_heartbeat_timeout: float | None = 300.0
    ft_rank_section_timeouts: dict[str, float] = field(default_factory=dict)
    ft_rank_out_of_section_timeout: float | None = None
    ft_calculate_timeouts: bool = False
    ft_safety_factor: float = DEFAULT_SAFETY_FACTOR
    ft_min_progress_iterations: int = 1
    workers_stop_timeout: float = 15.0
    ft_node_health_check_endpoint: str = ""
    ft_gpu_health: str = "auto"
    ft_node_health_check_interval: float = (
        DEFAULT_HEALTH_INTERVAL_S  # docs/launcher.md "Node health during the run"
    )
    ft_enable_nic_healthcheck: bool = False
    ft_nic_interfaces: str = ""
    ft_storage_healthcheck_path: str = ""
    ft_storage_healthcheck_timeout: float = 10.0
    ft_node_health_check_groups: str = "prolog,epilog,logs,gpu"
    ft_exclusion_file: str = ""
    ft_node_id: str = ""
    numa_binding: str = ""
    ft_log_funnel: str = ""
    ft_keep_rank_logs: bool = False
    ft_straggler_report_interval: float = 60.0  # straggler detection (docs/straggler.md)
    ft_straggler_threshold: float = 0.7
    standalone: bool = False
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    local_addr: str = ""
    start_method: str = "spawn"
    role: str = "default"
    module: bool = False
    no_python: bool = False
    run_path: bool = False
    redirects: str = "0"
    tee: str = "0"
    local_ranks_filter: str = ""
    log_line_prefix_template: str = ""
    ft_rdzv_impl: str = "barrier"
    ft_segment: int | None = None
    ft_use_infra_group_rank: bool = False
    infra_rank: int | None = None  # from the scheduler (launcher.rdzv.node), not an option
    segment_id: str | None = None  # this node's NVLink domain (launcher.rdzv.node)
    ft_job_secret_file: str = ""
    ft_insecure_store: bool = False  # a multi-node job may run without a job secret
    job_secret: bytes | None = None  # the rendezvous store's secret (launcher.rdzv.auth)
    ft_restart_policy: str = "any-failed"
    ft_max_no_progress_restarts: int = field(
        default_factory=lambda: _BY_DEST["ft_max_no_progress_restarts"].default
    )
    ft_same_root_retries: int = field(
        default_factory=lambda: _BY_DEST["ft_same_root_retries"].default
    )
    ft_workload_recurrence_stop: int = field(
        default_factory=lambda: _BY_DEST["ft_workload_recurrence_stop"].default
    )
    ft_startup_window: float = field(default_factory=lambda: _BY_DEST["ft_startup_window"].default)
    ft_max_no_progress_cycles: int | None = None
    llm_config: Any | None = None
    sources: dict[str, str] = field(default_factory=dict)  # dest -> default|yaml|cli
    warnings: list[str] = field(default_factory=list)  # one line each, printed before start

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
        """--ft-db-url > $RELAUNCH_DB > sqlite:///$RELAUNCH_HOME/relaunch.db (storage.location)."""
        return history_url(self.ft_db_url or None)[0]

    def history_line(self) -> str:
        """What `relaunch run` prints once at start: where this job's verdicts are kept."""
        endpoint = self.ft_attribution_endpoint
        if endpoint == "off":
            return "history: none (--ft-attribution-endpoint off: no verdicts are kept)"
        if endpoint != "embedded":
            return f"history: kept by the attribution service at {endpoint} (its --db)"
        return describe(*history_url(self.ft_db_url or None))

    def audit_dir(self) -> str:
        return self.ft_audit_dir or str((Path(self.log_dir) / "audit").resolve())

    def policy(self) -> Any:  # -> restart_agent.model.PolicyConfig
        """The verdict policy thresholds (`--ft-max-no-progress-restarts`, ...)."""
        return build_policy({p.dest: getattr(self, p.dest) for p in POLICY_OPTIONS})

    def console_spec(self) -> Any:  # -> launcher.console.ConsoleSpec
        from relaunch.launcher.console import ConsoleSpec, parse_ranks_filter, parse_std

        return ConsoleSpec(
            redirects=parse_std(self.redirects),
            tee=parse_std(self.tee),
            ranks_filter=parse_ranks_filter(self.local_ranks_filter),
            role=self.role,
            template=self.log_line_prefix_template,
        )

    def worker_command(self) -> tuple[Any, tuple[str, ...]]:
        """(entrypoint, args) of every worker, as torchrun builds them."""
        if self.run_path:  # takes precedence over --no-python, as in torchrun
            from torch.distributed.run import run_script_path

            return run_script_path, (os.path.abspath(self.script), *self.script_args)
        if self.no_python:
            return self.script, tuple(self.script_args)
        python = os.environ.get("PYTHON_EXEC", sys.executable)
        module = ("-m",) if self.module else ()
        return python, ("-u", *module, self.script, *self.script_args)

    def check_script(self) -> str | None:
        """Why the training script cannot start, or None (a module is found by the worker)."""
        if self.module and not self.run_path:
            return None
        if self.no_python and not self.run_path:
            if os.sep in self.script:
                if os.path.isfile(self.script) and os.access(self.script, os.X_OK):
                    return None
                return f"executable not found or not executable: {self.script}"
            if shutil.which(self.script) is None:
                return f"executable not found on PATH: {self.script}"
            return None
        if not os.path.isfile(self.script):
            return f"training script not found: {self.script}"
        return None


def spellings(o: Option) -> list[str]:
    """Every command-line spelling of an option: its flag and aliases, torchrun's
    underscore forms (`--nproc_per_node`) and NVRx's (`--ft-rdzv_impl`)."""
    flags: list[str] = []
    for flag in (o.flag, *o.aliases):
        forms = [flag]
        if flag.startswith("--"):
            forms.append("--" + flag[2:].replace("-", "_"))
            if flag.startswith("--ft-"):
                forms.append("--ft-" + flag[5:].replace("-", "_"))
        flags.extend(f for f in forms if f not in flags)
    return flags


BOOL_WORDS = ("true", "false", "1", "0", "yes", "no", "on", "off")
IGNORED_PREFIX = "nvrx_ignored__"  # dest of an NVRx flag relaunch accepts and ignores


class BoolFlag(argparse.Action):
    """A switch that also takes NVRx's value style: `--x`, `--x true`, `--x=no`, `--x 0`.

    argparse alone would swallow the script after a bare switch (`--standalone train.py`);
    `normalize_switches` rewrites the command line first so that never happens.
    """

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", const=True, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)


def normalize_switches(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """`--switch` -> `--switch=true`, `--switch no` -> `--switch=no` (BoolFlag options),
    scanning the options before the script; the script and its arguments stay as they are."""
    actions = parser._option_string_actions  # argparse's own table
    out: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--" or not tok.startswith("-") or tok == "-":
            out.extend(args[i:])
            break
        name, eq, _ = tok.partition("=")
        action = actions.get(name)
        if isinstance(action, BoolFlag):
            if eq:
                out.append(tok)
            elif i + 1 < len(args) and args[i + 1].strip().lower() in BOOL_WORDS:
                out.append(f"{name}={args[i + 1]}")
                i += 1
            else:
                out.append(f"{name}=true")
        elif action is not None and action.nargs is None and not eq and i + 1 < len(args):
            out.extend(args[i : i + 2])  # an option and its value (which may start with '-')
            i += 1
        else:
            out.append(tok)
        i += 1
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every option with `default=SUPPRESS`, so omitted options stay absent; then NVRx's
    flags relaunch accepts and ignores (`config/aliases.yaml` `ignored_flags`)."""
    for o in OPTIONS:
        flags = spellings(o)
        if o.is_flag:
            parser.add_argument(
                *flags,
                dest=o.dest,
                action=BoolFlag,
                type=_argparse_type(o),
                default=argparse.SUPPRESS,
                help=f"{o.help} (also --x true|false, as NVRx)",
                metavar="BOOL",
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
    group = parser.add_argument_group("NVRx flags accepted and ignored (a warning says why)")
    for flag, (takes, instead) in ignored_flags().items():
        forms = spellings(Option(flag, "", str, None, ""))
        dest = IGNORED_PREFIX + flag.lstrip("-").replace("-", "_")
        if takes == "bool":
            group.add_argument(
                *forms, dest=dest, action=BoolFlag, type=_bool_type(flag),
                default=argparse.SUPPRESS, metavar="BOOL", help=f"ignored: {instead}",
            )  # fmt: skip
        elif takes == "flag":
            group.add_argument(
                *forms, dest=dest, action="store_true", default=argparse.SUPPRESS,
                help=f"ignored: {instead}",
            )  # fmt: skip
        else:
            group.add_argument(
                *forms, dest=dest, default=argparse.SUPPRESS, metavar="VALUE",
                help=f"ignored: {instead}",
            )  # fmt: skip


def _bool_type(flag: str) -> Callable[[str], bool]:
    return _argparse_type(Option(flag, flag, boolean, None, ""))


def ignored_warnings(cli: dict[str, Any]) -> list[str]:
    """One line per NVRx flag given that relaunch ignores: what relaunch does instead."""
    table = ignored_flags()
    out = []
    for name in sorted(cli):
        if name.startswith(IGNORED_PREFIX):
            flag = "--" + name[len(IGNORED_PREFIX) :].replace("_", "-")
            out.append(f"{flag} is accepted for NVRx and ignored: {table[flag][1]}")
    return out


def _argparse_type(o: Option) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return o.type(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None

    convert.__name__ = o.dest
    return convert


def resolve(cli: dict[str, Any], yaml_path: str | None = None) -> RunSettings:
    """Merge defaults < YAML < CLI into a checked `RunSettings`."""
    settings = RunSettings()
    names = {f.name for f in fields(RunSettings)}
    for o in OPTIONS:
        settings.sources[o.dest] = "default"
    if yaml_path:
        for name, value in _load_yaml(yaml_path, _BY_DEST, settings.warnings).items():
            setattr(settings, name, value)
            settings.sources[name] = "yaml"
    settings.warnings.extend(ignored_warnings(cli))
    for name, value in cli.items():
        if name in names:
            setattr(settings, name, value)
            if name in _BY_DEST:
                settings.sources[name] = "cli"
    if not settings.job_id:
        settings.job_id = settings.rdzv_id or f"job-{uuid.uuid4().hex[:12]}"
    if not settings.rdzv_id:
        settings.rdzv_id = settings.job_id
    if (problem := job_id_rule.problem(settings.job_id)) is not None:
        raise ConfigError(f"--job-id {problem}")
    _torchrun_compat(settings)
    if settings.max_nodes > 1 and not settings.rdzv_endpoint:
        raise ConfigError("--rdzv-endpoint HOST:PORT is required when --nnodes allows > 1 node")
    if settings.ft_log_funnel not in ("", "auto") and (
        ":" not in settings.ft_log_funnel or settings.ft_log_funnel.endswith(":")
    ):
        raise ConfigError(
            f"--ft-log-funnel {settings.ft_log_funnel!r}: expected HOST:PORT or unix:/PATH (or auto)"
        )
    if settings.ft_node_health_check_endpoint:
        from relaunch.launcher.health.external import normalize_endpoint

        try:
            normalize_endpoint(settings.ft_node_health_check_endpoint)
        except ValueError as exc:
            raise ConfigError(f"--ft-node-health-check-endpoint: {exc}") from None
    _check_health_options(settings)
    if not settings.rdzv_endpoint:
        settings.rdzv_endpoint = "127.0.0.1:0"  # single node: the agent hosts the store
    from relaunch.launcher.rdzv import node as rdzv_node

    try:
        rdzv_node.check(settings)  # --ft-segment, --ft-use-infra-group-rank
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:
        settings.policy()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return settings


_RANK = {"default": 0, "yaml": 1, "cli": 2}


def _check_health_options(s: RunSettings) -> None:
    """One-line errors for the run-time health options (launcher.health.options)."""
    from relaunch.launcher.health.options import check_options

    try:
        check_options(s)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _torchrun_compat(settings: RunSettings) -> None:
    """torchrun's and NVRx's spellings -> the settings relaunch acts on."""
    s = settings
    if s.module and s.no_python and not s.run_path:
        raise ConfigError("--module and --no-python cannot be used together (as in torchrun)")
    if s.standalone:
        if s.max_nodes > 1:
            raise ConfigError("--standalone is for single-node jobs (--nnodes 1)")
        # as torchrun: a local c10d store; explicit rendezvous values are replaced
        s.rdzv_backend = "c10d"
        s.rdzv_endpoint = f"127.0.0.1:{s.master_port or 0}"
    elif not s.rdzv_endpoint and (s.master_port is not None or s.rdzv_backend == "static"):
        # NVRx (and torchrun for static): --master-addr:--master-port is the endpoint
        s.rdzv_endpoint = f"{s.master_addr}:{s.master_port or STATIC_MASTER_PORT}"
    if s.sources.get("ft_restart_policy", "default") != "default":
        s.warnings.append(
            "--ft-restart-policy is deprecated (as in NVRx): any-failed is the only policy"
        )
    cycles = s.ft_max_no_progress_cycles
    source = s.sources.get("ft_max_no_progress_cycles", "default")
    if cycles is not None and _RANK[source] >= _RANK[s.sources["ft_max_no_progress_restarts"]]:
        s.ft_max_no_progress_restarts = cycles
        s.sources["ft_max_no_progress_restarts"] = source
