"""relaunch lives under one namespace, `relaunch.*`: a user's own top-level `storage`,
`web` or `launcher` neither shadows relaunch nor is shadowed by it (issue 25, item 5).

Every process here runs the installed package (no PYTHONPATH), from a user's directory
that holds modules named like relaunch's folders.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

USER_MODULES = {
    "storage.py": "MARK = 'user storage'\n",
    "launcher/__init__.py": "MARK = 'user launcher'\n",
    "web/__init__.py": "raise ImportError('a user package relaunch must never import')\n",
    "restart_agent.py": "raise ImportError('a user module relaunch must never import')\n",
}


def _user_dir(tmp_path: Path) -> Path:
    user = tmp_path / "user"
    for name, text in USER_MODULES.items():
        (user / name).parent.mkdir(parents=True, exist_ok=True)
        (user / name).write_text(text)
    return user


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["RELAUNCH_HOME"] = str(tmp_path / "home")
    env.pop("TORCHELASTIC_RESTART_COUNT", None)
    return env


def test_a_users_storage_and_relaunch_storage_are_two_modules(tmp_path: Path) -> None:
    user = _user_dir(tmp_path)
    script = user / "check.py"
    script.write_text(
        "import storage, launcher\n"
        "import relaunch.storage, relaunch.launcher.agent, relaunch.web.routes\n"
        "import relaunch.restart_agent\n"
        "from relaunch import client\n"
        "assert storage.MARK == 'user storage', storage\n"
        "assert launcher.MARK == 'user launcher', launcher\n"
        "assert hasattr(relaunch.storage, 'open_repository')\n"
        "assert client.__name__ == 'relaunch.launcher.client'\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=user,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_relaunch_analyze_runs_from_a_directory_with_hostile_module_names(
    tmp_path: Path,
) -> None:
    user = _user_dir(tmp_path)
    (user / "cycle_0.log").write_text("SyntaxError: invalid syntax\n")
    out = subprocess.run(
        [sys.executable, "-m", "relaunch", "analyze", "cycle_0.log", "--format", "json"],
        cwd=user,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert '"decision": "STOP"' in out.stdout


@pytest.mark.slow
def test_workers_import_their_own_storage_and_get_no_relaunch_pythonpath(tmp_path: Path) -> None:
    user = _user_dir(tmp_path)
    (user / "train.py").write_text(
        "import os, storage\n"
        "from relaunch.client import heartbeat\n"
        "heartbeat()\n"
        "print('worker storage:', storage.MARK, flush=True)\n"
        "print('worker PYTHONPATH:', repr(os.environ.get('PYTHONPATH', '')), flush=True)\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "relaunch",
            "run",
            "--nproc-per-node",
            "1",
            "--log-dir",
            str(tmp_path / "logs"),
            "--job-id",
            "ns",
            "--ft-gpu-health",
            "off",
            "--ft-attribution-endpoint",
            "off",
            "train.py",
        ],
        cwd=user,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    log = (tmp_path / "logs" / "ns" / "cycle_0.log").read_text()
    assert "worker storage: user storage" in log
    assert "worker PYTHONPATH: ''" in log
