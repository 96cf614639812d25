"""Progress extraction: every dialect of restart_agent/progress.yaml, first/last iteration,
checkpoints, unknown progress, and extension by configuration (RELAUNCH_PROGRESS_DIALECTS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relaunch.restart_agent.registry import RegistryError, build_registry, default_registry
from tests._agent_helpers import make_logs, scan_text

ML = make_logs()
DIALECTS = [(d.id, d.kind, ex) for d in default_registry().dialects for ex in d.examples]


@pytest.mark.parametrize(("dialect", "kind", "line"), DIALECTS)
def test_dialect_examples(dialect: str, kind: str, line: str) -> None:
    ev = scan_text(f"[rank0]: {line}\n")
    p = ev.progress
    if kind == "activity":  # proof the job ran past startup, not progress
        assert not p.known and p.ran_past_startup
        return
    assert p.known
    if kind in ("iteration", "fallback"):
        assert p.dialect == dialect and p.last_iteration is not None
    else:
        assert p.last_checkpoint is not None


NOT_DIALECTS = [(d.id, ex) for d in default_registry().dialects for ex in d.not_examples]


@pytest.mark.parametrize(("dialect", "line"), NOT_DIALECTS)
def test_dialect_not_examples(dialect: str, line: str) -> None:
    """Eval/loading bars, checkpoint loads, Slurm step ids: never this dialect's progress."""
    assert scan_text(f"[rank0]: {line}\n").progress.dialect != dialect


@pytest.mark.parametrize(
    ("dialect", "first", "last"),
    [
        ("megatron", 1, 40),
        ("hf", 1, 40),
        ("lightning", 1, 40),
        ("plain", 1, 40),
        ("relaunch", 1, 40),
    ],
)
def test_first_and_last_iteration_of_generated_logs(dialect: str, first: int, last: int) -> None:
    ev = scan_text(ML.make_log("key_error", ranks=4, lines=400, seed=1, dialect=dialect))
    assert (ev.progress.first_iteration, ev.progress.last_iteration) == (first, last)
    assert ev.progress.line is not None and ev.progress.line > 1


def test_lightning_epoch_and_step_make_a_global_step() -> None:
    ev = scan_text("Epoch 2:  45%|####5     | 450/1000 [01:23<01:40, 5.47it/s]\n")
    assert ev.progress.last_iteration == 2 * 1000 + 450


def test_tqdm_redraws_on_one_line_keep_the_last_state() -> None:
    line = b"".join(
        b"\r%3d%%|#| %d/1000 [00:01<00:10, 9.1it/s]" % (i // 10, i) for i in range(0, 600, 7)
    )
    assert scan_text(line + b"\n").progress.last_iteration == 595


def test_checkpoint_saves() -> None:
    text = (
        "[rank0]: step 10 | loss 2\n"
        "[rank0]:   successfully saved checkpoint from iteration    1000 to /ckpt/gpt\n"
        "[rank0]: step 12 | loss 2\n"
    )
    p = scan_text(text).progress
    assert (p.last_checkpoint, p.checkpoint_iteration, p.last_iteration) == ("/ckpt/gpt", 1000, 12)


def test_nothing_matched_is_unknown_not_zero() -> None:
    ev = scan_text(ML.make_log("key_error", ranks=4, lines=50, seed=1, dialect="none"))
    assert not ev.progress.known
    assert ev.progress.last_iteration is None


def test_look_alikes_are_not_progress() -> None:
    for line in (
        "elapsed time per iteration (ms): 812.3",
        "number of skipped iterations:   0",
        "[INFO] micro_step=120, skipped=0",
        "/site-packages/torch/utils/checkpoint.py:91: UserWarning",
    ):
        assert not scan_text(line + "\n").progress.known, line


def test_progress_is_found_whatever_the_noise_between(tmp_path: Path) -> None:
    text = "[rank0]: step 7 | loss 1\n" + "[rank1]: torch/utils/checkpoint.py step' warn\n" * 500
    assert scan_text(text).progress.last_iteration == 7


def test_extra_dialect_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    extra = tmp_path / "mine.yaml"
    extra.write_text(
        "dialects:\n  - id: mytrainer\n    kind: iteration\n"
        "    regex: 'MYTRAIN it#(?P<it>\\d+)'\n    examples: ['MYTRAIN it#77']\n"
    )
    text = "[rank0]: MYTRAIN it#77 ok\n"
    assert not scan_text(text).progress.known
    monkeypatch.setenv("RELAUNCH_PROGRESS_DIALECTS", str(extra))
    ev = scan_text(text, registry=default_registry())
    assert (ev.progress.dialect, ev.progress.last_iteration) == ("mytrainer", 77)


def test_bad_dialects_are_rejected(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("dialects:\n  - id: x\n    kind: iteration\n    regex: '(?P<n>\\d+)'\n")
    with pytest.raises(RegistryError, match="named group 'it' or 'path'"):
        build_registry(dialect_files=[f])
    f.write_text("dialects:\n  - id: x\n    kind: iteration\n    regex: '\\d+ (?P<it>\\d+)'\n")
    with pytest.raises(RegistryError, match="must start with a literal"):
        build_registry(dialect_files=[f])
    f.write_text("dialects:\n  - id: x\n    kind: speed\n    regex: 'it (?P<it>\\d+)'\n")
    with pytest.raises(RegistryError, match="kind must be one of"):
        build_registry(dialect_files=[f])
