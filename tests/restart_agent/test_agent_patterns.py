"""The pattern registry (restart_agent/patterns.yaml): every row's examples match that row
through the whole scanner, important look-alikes match nothing, bad tables are rejected."""

from __future__ import annotations

from pathlib import Path

import pytest

from relaunch.restart_agent import LogScanner
from relaunch.restart_agent.registry import (
    DOMAINS,
    RECOVERABILITY,
    ROLES,
    RegistryError,
    build_registry,
    default_registry,
)
from tests._agent_helpers import scan_text

REG = default_registry()
CASES = [(row.id, ex) for row in REG.patterns for ex in row.examples]


def _all_evidence(ev):
    return list(ev.roots) + list(ev.cascade_evidence) + list(ev.diagnostics)


def test_every_row_is_complete_and_most_have_examples() -> None:
    ids = [r.id for r in REG.patterns]
    assert len(ids) == len(set(ids)), "duplicate row ids"
    for r in REG.patterns:
        assert r.domain in DOMAINS and r.role in ROLES and r.recoverability in RECOVERABILITY
        assert r.triggers
    with_examples = sum(1 for r in REG.patterns if r.examples)
    assert with_examples >= len(REG.patterns) - 3


@pytest.mark.parametrize(
    ("row_id", "line"), CASES, ids=[f"{i}:{n}" for n, (i, _) in enumerate(CASES)]
)
def test_example_line_is_classified_by_its_row(row_id: str, line: str) -> None:
    ev = scan_text(f"[rank7]: {line}\n")
    found = _all_evidence(ev)
    assert found, f"nothing matched {line!r}"
    assert found[0].pattern_id == row_id
    assert found[0].line == 1


REQUIRED_CLASSES = {
    "cuda_illegal_memory_access",
    "cuda_device_assert",
    "cuda_launch_failure",
    "cuda_oom",
    "host_oom_kill",
    "gpu_xid",
    "gpu_ecc_error",
    "gpu_fallen_off_bus",
    "nvlink_error",
    "pcie_error",
    "nccl_error",
    "nccl_remote_error",
    "nccl_comm_aborted",
    "nccl_watchdog_timeout",
    "distributed_timeout",
    "hang_detected",
    "segfault",
    "sigbus",
    "illegal_instruction",
    "killed_sigkill",
    "sigterm_teardown",
    "elastic_child_failed",
    "preemption",
    "node_failure",
    "time_limit",
    "user_cancellation",
    "nan_loss",
    "bad_sample",
    "fs_no_space",
    "fs_io_error",
    "fs_stale_handle",
    "fs_permission_denied",
    "fs_not_found",
    "checkpoint_load_failure",
    "python_syntax_error",
    "python_import_error",
    "python_name_error",
    "python_attribute_error",
    "python_type_error",
    "python_key_error",
    "python_value_error",
    "python_assertion_error",
    "invalid_argument",
    "invalid_config",
}


def test_registry_covers_every_class_of_the_issue() -> None:
    classes = {r.failure_class for r in REG.patterns if r.examples}
    assert classes >= REQUIRED_CLASSES, sorted(REQUIRED_CLASSES - classes)


NON_MATCHES = [
    "node003:1234:5678 [3] NCCL INFO Channel 00/32 : 0 1 2 3 via P2P/IPC/read",
    "/usr/lib/python3/site-packages/torch/utils/checkpoint.py:91: UserWarning: None of the inputs have requires_grad=True",
    " iteration     1200/  500000 | lm loss: 2.3E+00 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "  error_file: <N/A>",
    "[relaunch] progress iteration=1200",
    "validation passed: 0 errors, 0 warnings",
    "Epoch 3: 45%|####5     | 450/1000 [01:23<01:40, 5.47it/s]",
    "INFO: registered signal handlers for SIGTERM-free shutdown",  # no signal name match
    "loss 2.31 grad_norm 0.98 (finite)",
    "Saving model checkpoint to /out/checkpoint-500",
    "the model handles KeyErrors gracefully",
    "WARNING: ECC mode is enabled on all GPUs",
    "error: argument list too long",  # not argparse: no program name, not its wording
]


@pytest.mark.parametrize("line", NON_MATCHES)
def test_look_alike_lines_match_nothing(line: str) -> None:
    ev = scan_text(f"[rank0]: {line}\n")
    assert _all_evidence(ev) == [], [e.pattern_id for e in _all_evidence(ev)]
    assert ev.primary is None


def test_specific_rows_win_over_generic_ones() -> None:
    ev = scan_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert ev.primary.failure_class == "cuda_illegal_memory_access"
    ev = scan_text("ValueError: Invalid configuration: global batch size 7 is not divisible\n")
    assert ev.primary.failure_class == "invalid_config"
    # an exception no row names is classified from its structure (issue 24): raised in the
    # user's own frame it is a probable workload bug; a bare line with nothing that leans
    # either way is unknown (restart within the budgets, never a STOP on one recurrence)
    tb = 'Traceback (most recent call last):\n  File "/work/train.py", line 3, in main\n'
    ev = scan_text(tb + "RuntimeError: something else went wrong\n")
    assert (ev.primary.failure_class, ev.primary.domain) == ("python_exception", "workload")
    assert ev.primary.recoverability == "probable"
    assert ev.primary.structural and "user's own frame" in ev.primary.structural
    ev = scan_text("RuntimeError: something else went wrong\n")
    assert (ev.primary.failure_class, ev.primary.domain) == ("python_exception", "unknown")
    assert ev.primary.recoverability == "unknown"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_bad_regex_is_rejected_with_file_and_row(tmp_path: Path) -> None:
    bad = _write(
        tmp_path,
        "bad.yaml",
        "patterns:\n  - id: site.bad\n    regex: '(unclosed'\n    failure_class: x\n"
        "    domain: workload\n    role: root\n    triggers: ['rror']\n",
    )
    with pytest.raises(RegistryError, match=r"bad\.yaml: row 'site\.bad': bad regex"):
        build_registry([bad])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("domain", "cosmic", "domain must be one of"),
        ("role", "villain", "role must be one of"),
        ("triggers", "[]", "triggers must be a non-empty list"),
        ("rank_source", "'Open MPI'", "rank_source must be a lower_case word"),
        ("rank_source", "[mpirun]", "rank_source must be a lower_case word"),
    ],
)
def test_bad_row_fields_are_rejected(tmp_path: Path, field: str, value: str, message: str) -> None:
    row = {
        "id": "site.x",
        "regex": "'boom'",
        "failure_class": "x",
        "domain": "workload",
        "role": "root",
        "triggers": "['rror']",
    }
    row[field] = value
    text = "patterns:\n  - " + "\n    ".join(f"{k}: {v}" for k, v in row.items()) + "\n"
    with pytest.raises(RegistryError, match=message):
        build_registry([_write(tmp_path, "x.yaml", text)])


def test_not_yaml_and_missing_file_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="not valid YAML"):
        build_registry([_write(tmp_path, "b.yaml", "patterns: [\n")])
    with pytest.raises(RegistryError, match="cannot read"):
        build_registry([tmp_path / "missing.yaml"])


def test_extra_pattern_table_from_environment_is_tried_first(tmp_path: Path, monkeypatch) -> None:
    extra = _write(
        tmp_path,
        "site.yaml",
        "patterns:\n  - id: site.flaky_storage\n"
        "    regex: '(?P<msg>OSError: \\[Errno 5\\] Input/output error).*lustre'\n"
        "    failure_class: lustre_flake\n    domain: infrastructure\n    role: root\n"
        "    recoverability: retry\n    triggers: ['rror']\n",
    )
    line = "OSError: [Errno 5] Input/output error: '/lustre/data/x.bin'\n"
    assert scan_text(line).primary.failure_class == "fs_io_error"
    monkeypatch.setenv("RELAUNCH_PATTERNS_EXTRA", str(extra))
    ev = scan_text(line, registry=default_registry())
    assert ev.primary.failure_class == "lustre_flake"
    assert LogScanner().registry.patterns[0].id == "site.flaky_storage"
