"""launcher.fr_dumps: the Flight Recorder settings of a cycle; the user's win."""

from __future__ import annotations

from pathlib import Path

from relaunch.launcher import fr_dumps


def test_cycle_env_sets_buffer_and_dump_location(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    where = fr_dumps.cycle_env(env, {}, tmp_path, 3)
    assert where == tmp_path / "fr" / "cycle_3" and where.is_dir()
    assert env == {
        "RELAUNCH_FR_DIR": str(where),
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_FR_DUMP_TEMP_FILE": str(where / "rank_"),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    }


def test_user_settings_win_every_cycle(tmp_path: Path) -> None:
    user = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "64", "TORCH_FR_DUMP_TEMP_FILE": "/scratch/fr_"}
    env = dict(user)
    fr_dumps.cycle_env(env, user, tmp_path, 0)
    fr_dumps.cycle_env(env, user, tmp_path, 1)
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == "/scratch/fr_"
    assert "TORCH_FR_BUFFER_SIZE" not in env
    assert env["RELAUNCH_FR_DIR"] == str(tmp_path / "fr" / "cycle_1")


def test_request_waits_only_for_the_ranks_named(tmp_path: Path) -> None:
    where = fr_dumps.cycle_dir(tmp_path, 0)
    where.mkdir(parents=True)
    (where / "rank_4").write_bytes(b"x")
    assert fr_dumps.request(where, [4], wait_s=5) == [4]
    assert (where / "request").exists()
    assert fr_dumps.request(where, [], wait_s=5) == []
    assert fr_dumps.request(where, [5], wait_s=0.1) == []  # a rank that never dumps
