"""Every flag of NVRx 0.7.0's ft_launcher parser is accepted by `relaunch run` (implemented,
or accepted with a one-line warning), in NVRx's value style: booleans as true/false/1/0/yes/no,
timeouts as null/none. NVRx's flag list is read from its own launcher source in the wheel."""

from __future__ import annotations

import argparse
import ast
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from relaunch.cli.run_cmd import build_parser
from relaunch.launcher import config
from tests._nvrx_helpers import nvrx_wheel, unpack

_SOURCES = (
    "nvidia_resiliency_ext/fault_tolerance/launcher.py",
    "nvidia_resiliency_ext/fault_tolerance/cli_args.py",
)


def _wheel() -> Path:
    wheel = nvrx_wheel()
    if isinstance(wheel, str):
        pytest.skip(wheel)
    return wheel


def _flags_in_source(text: str) -> set[str]:
    """Option strings in the source's argument registrations: string literals starting
    with '-' passed to add_argument/_add_argument or as an `aliases=` tuple (a superset of
    one parser's flags: cli_args.py also serves NVRx's other entry points)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        values: list[ast.expr] = []
        if name in ("add_argument", "_add_argument"):
            values += node.args
        for kw in node.keywords:
            if kw.arg == "aliases" and isinstance(kw.value, ast.Tuple | ast.List):
                values += kw.value.elts
        for arg in values:
            if isinstance(arg, ast.Constant) and str(arg.value).startswith("-"):
                found.add(str(arg.value))
    return found - {"-h", "--help"}


@pytest.fixture(scope="module")
def nvrx_flags() -> set[str]:
    with zipfile.ZipFile(_wheel()) as zf:
        return set().union(*(_flags_in_source(zf.read(p).decode()) for p in _SOURCES))


@pytest.fixture(scope="module")
def nvrx_parser(tmp_path_factory: pytest.TempPathFactory) -> argparse.ArgumentParser:
    root = unpack(_wheel(), tmp_path_factory.mktemp("nvrx"))
    sys.path.insert(0, str(root))
    try:
        from nvidia_resiliency_ext.fault_tolerance.launcher import get_args_parser

        return get_args_parser()
    finally:
        sys.path.remove(str(root))


def _parser() -> argparse.ArgumentParser:
    return build_parser("relaunch run")


def test_the_source_scan_finds_what_nvrx_parser_has(
    nvrx_flags: set[str], nvrx_parser: argparse.ArgumentParser
) -> None:
    real = {s for a in nvrx_parser._actions for s in a.option_strings} - {"-h", "--help"}
    assert real <= nvrx_flags, sorted(real - nvrx_flags)
    assert len(real) > 100  # spellings of ~80 options


def test_every_nvrx_flag_is_a_relaunch_flag(nvrx_flags: set[str]) -> None:
    ours = _parser()._option_string_actions
    assert sorted(nvrx_flags - set(ours)) == []


# a value each of NVRx's value-taking options accepts in relaunch too (others: NVRx's type)
_SAMPLES = {
    "--nnodes": "1",
    "--nproc-per-node": "2",
    "--rdzv-backend": "c10d",
    "--rdzv-endpoint": "127.0.0.1:29400",
    "--rdzv-id": "j1",
    "--rdzv-conf": "timeout=30",
    "--local-addr": "127.0.0.1",
    "--start-method": "spawn",
    "--role": "trainer",
    "--log-dir": "logs",
    "--redirects": "3",
    "--tee": "3",
    "--local-ranks-filter": "0",
    "--master-addr": "127.0.0.1",
    "--ft-cfg-path": "ft.yaml",
    "--ft-initial-rank-heartbeat-timeout": "null",
    "--ft-rank-heartbeat-timeout": "none",
    "--ft-rank-out-of-section-timeout": "null",
    "--ft-rank-section-timeouts": "setup:600,step:none",
    "--ft-safety-factor": "5",
    "--ft-node-health-check-interval": "5",
    "--ft-node-health-check-endpoint": "unix:///tmp/nvhcd.sock",
    "--ft-restart-policy": "any-failed",
    "--ft-rdzv-impl": "barrier",
    "--ft-attribution-endpoint": "off",
    "--ft-attribution-stop-action": "no-restart",
    "--ft-attribution-llm-base-url": "http://127.0.0.1:8000/v1",
    "--ft-max-no-progress-cycles": "3",
    "--ft-segment": "4",
}


def _sample(action: argparse.Action) -> list[str]:
    long = max(action.option_strings, key=lambda s: (s.startswith("--"), -s.count("_")))
    if action.nargs == 0:
        return [long]
    kind = getattr(action.type, "__name__", "")
    if long in _SAMPLES:
        value = _SAMPLES[long]
    elif kind == "<lambda>":  # NVRx's value-style booleans
        value = "false"
    elif kind == "int":
        value = "2"
    elif kind == "float":
        value = "2.5"
    else:
        value = "x"
    return [long, value]


def test_every_nvrx_option_parses_in_nvrx_style(nvrx_parser: argparse.ArgumentParser) -> None:
    ours = _parser()
    for action in nvrx_parser._actions:
        if not action.option_strings or action.option_strings[0] == "-h":
            continue
        argv = [*_sample(action), "train.py", "--lr", "1"]
        ns = ours.parse_args(argv)
        assert ns.script == "train.py" and ns.script_args == ["--lr", "1"], argv


def _resolve(argv: list[str]) -> config.RunSettings:
    from relaunch.cli.run_cmd import settings_from_args

    return settings_from_args(_parser().parse_args(argv))


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["--ft-use-infra-group-rank", "false"], "ft_use_infra_group_rank", False),
        (["--ft-use-infra-group-rank", "yes"], "ft_use_infra_group_rank", True),
        (["--ft-use-infra-group-rank"], "ft_use_infra_group_rank", True),
        (["--ft-enable-nic-healthcheck", "true"], "ft_enable_nic_healthcheck", True),
        (["--ft-enable-nic-healthcheck=0"], "ft_enable_nic_healthcheck", False),
        (["--standalone"], "standalone", True),
        (["--ft-initial-rank-heartbeat-timeout", "null"], "ft_initial_heartbeat_timeout", None),
        (["--ft-rank-heartbeat-timeout", "none"], "ft_heartbeat_timeout", None),
        (["--ft-rank-section-timeouts", "a:5,b:null"], "ft_rank_section_timeouts", {"a": 5.0}),
    ],
)
def test_value_style_booleans_and_nulls(
    argv: list[str], dest: str, value: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GROUP_RANK", "0")  # what --ft-use-infra-group-rank needs to start
    (tmp_path / "train.py").write_text("")
    s = _resolve([*argv, "--log-dir", str(tmp_path / "logs"), "train.py", "true"])
    assert getattr(s, dest) == value
    assert s.script == "train.py" and s.script_args == ["true"]  # the script is never eaten


def test_ignored_flags_warn_once_each_with_what_relaunch_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    s = _resolve(
        ["--term-timeout", "30", "--ft-enable-nic-monitor", "true", "--logs-specs", "{}",
         "--ft-log-level", "DEBUG", "--log-dir", str(tmp_path / "l"), "train.py"]
    )  # fmt: skip
    assert s.warnings == [
        "--ft-enable-nic-monitor is accepted for NVRx and ignored: link_downed counters are "
        "not watched; --ft-enable-nic-healthcheck watches link state",
        "--ft-log-level is accepted for NVRx and ignored: relaunch's launcher lines go to "
        "the cycle logs",
        "--logs-specs is accepted for NVRx and ignored: relaunch writes one log per cycle "
        "under --log-dir/<job-id>/ (--tee/--redirects for the console)",
        "--term-timeout is accepted for NVRx and ignored: relaunch ends its workers with "
        "SIGTERM then SIGKILL after --workers-stop-timeout",
    ]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["--ft-enable-nic-monitor=maybe"],
            "--ft-enable-nic-monitor: 'maybe': must be true or false",
        ),
        (["--ft-rank-heartbeat-timeout", "soon"], "--ft-heartbeat-timeout"),
        (["--ft-use-infra-group-rank=2"], "must be true or false"),
    ],
)
def test_bad_values_are_one_line_errors(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args([*argv, "train.py"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_ignore_missing_cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from relaunch.cli.errors import UserError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    base = ["--ft-cfg-path", str(tmp_path / "absent.yaml"), "--log-dir", str(tmp_path / "l")]
    with pytest.raises(UserError):
        _resolve([*base, "train.py"])
    s = _resolve([*base, "--ft-ignore-missing-cfg", "train.py"])
    assert s.warnings[0].endswith("absent.yaml: no such file; defaults apply")
