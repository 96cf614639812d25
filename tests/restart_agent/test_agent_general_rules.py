"""General rules from the label policy (docs/restart_agent.md, "General rules of the label
policy"), one test per rule, on synthetic lines in the layouts real logs use (each test says
which). Every log is decided as two identical cycles through stored verdicts (`run_job`),
the way the service decides a job's cycles.
"""

from __future__ import annotations

import pytest

from tests._agent_helpers import run_job


def _two(text: str) -> tuple[object, object]:
    first, second = run_job([text, text])
    return first, second


def _decisions(text: str) -> tuple[str, str, object]:
    first, second = _two(text)
    return first.decision, second.decision, first.primary  # type: ignore[attr-defined]


# ---------------------------------------------------------------- Root Cause entry's own line
# torch elastic's summary (torchrun, 2023-2024 layout): every rank died of SIGBUS at the same
# second; the `Failures:` list comes first in the log, the Root Cause entry names rank 0
SIGBUS_SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
train.py FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2024-12-31_16:45:52
  host      : server
  rank      : 1 (local_rank: 1)
  exitcode  : -7 (pid: 467398)
  error_file: <N/A>
  traceback : Signal 7 (SIGBUS) received by PID 467398
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-12-31_16:45:52
  host      : server
  rank      : 0 (local_rank: 0)
  exitcode  : -7 (pid: 467397)
  error_file: <N/A>
  traceback : Signal 7 (SIGBUS) received by PID 467397
======================================================
"""


def test_root_cause_entry_names_the_rank_of_a_signal_death_listed_after_the_failures() -> None:
    first, second, primary = _decisions(SIGBUS_SUMMARY)
    assert (first, second) == ("RESTART", "RESTART")  # a signal without a Python error
    assert primary.rank == 0 and primary.rank_source == "elastic_root_cause", primary


# ---------------------------------------------------------------- kernel programming errors
@pytest.mark.parametrize(
    "line",
    [
        # torch's CUDA error text as `[rankN]:`-prefixed torchrun workers print it
        "[rank0]: RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "RuntimeError: CUDA error: misaligned address",
        "RuntimeError: CUDA error: invalid configuration argument",
        # ROCm builds say HIP
        "RuntimeError: HIP error: invalid device function",
    ],
)
def test_kernel_programming_errors_stop_on_an_identical_recurrence(line: str) -> None:
    # before this rule `no kernel image ... on the device` tied 'device' against the
    # workload words and restarted forever
    first, second, primary = _decisions(line + "\n")
    assert (first, second) == ("RESTART", "STOP"), primary
    assert primary.failure_class == "cuda_kernel_error" and primary.domain == "workload"


def test_kernel_printed_device_assert_is_a_workload_bug_even_without_the_python_error() -> None:
    # ATen's kernel assert as printed to stderr (one line per thread), the Python
    # `device-side assert triggered` line cut from the excerpt
    log = (
        "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:662: indexSelectLargeIndex: block: "
        "[148,0,0], thread: [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
    ) * 3
    first, second, primary = _decisions(log)
    assert (first, second) == ("RESTART", "STOP"), primary
    assert primary.failure_class == "cuda_device_assert"


# ---------------------------------------------------------------- XLA / TF status codes
def test_xla_status_code_leans_by_its_message() -> None:
    # torch_xla's XRTCompile error layout: `(N) <Status>: <message>`
    compile_error = (
        "Exception in device=TPU:6: Failed precondition: From /job:tpu_worker/replica:0/task:0:\n"
        "  (0) Failed precondition: Expected comparison type FLOAT or TOTALORDER.\n"
    )
    # ... and the same status from a TPU driver in a bad state: never a STOP
    driver = "  (0) Failed precondition: Driver must be Open to DMA map.\n"
    f, s, primary = _decisions(compile_error)
    assert (f, s) == ("RESTART", "STOP") and primary.failure_class == "xla_program_error"
    f, s, primary = _decisions(driver)
    assert (f, s) == ("RESTART", "RESTART") and primary.domain == "infrastructure", primary


def test_tensorflow_oom_hint_is_an_out_of_memory_at_startup() -> None:
    # TF / XRT print the hint after every OOM status; the status line itself is often cut
    log = (
        "\t [[{{node XRTCompile}}]]\n"
        "Hint: If you want to see a list of allocated tensors when OOM happens, add "
        "report_tensor_allocations_upon_oom to RunOptions for current allocation info.\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "STOP") and primary.failure_class == "cuda_oom"


# ---------------------------------------------------------------- C++ what()
def test_cpp_what_message_is_classified_structurally_with_habana_rank_tag() -> None:
    # Habana's PT bridge: `terminate called ...` then `what():  [Rank:0] ...`
    log = (
        "terminate called after throwing an instance of 'c10::Error'\n"
        "  what():  [Rank:0] FATAL ERROR :: MODULE:PT_DEVICE GRAPH:: Capture must end on the "
        "same stream it began on.\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "STOP"), primary
    assert primary.failure_class == "cpp_exception" and primary.rank == 0


def test_a_named_root_wins_over_a_what_message_that_leans_nowhere() -> None:
    # Intel XPU (SYCL): the bare what() first, the allocator's out-of-memory right after
    log = (
        "terminate called after throwing an instance of 'sycl::_V1::exception'\n"
        "  what():  Enqueue process failed.\n"
        "level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)\n"
    )
    f, s, primary = _decisions(log)
    assert primary.failure_class == "cuda_oom", primary
    assert (f, s) == ("RESTART", "STOP")  # OOM identical on two startup cycles


# ---------------------------------------------------------------- config ValueErrors
@pytest.mark.parametrize(
    "line",
    [
        # transformers' DeepSpeed integration, LLaMA-Factory / HF Trainer layouts
        "ValueError: Please correct the following DeepSpeed config values that mismatch "
        "TrainingArguments values:",
        "ValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with "
        "passing a `device_map`.",
        "[rank0]: ValueError: --fp16 and --bf16 are mutually exclusive",
    ],
)
def test_value_error_about_the_configuration_stops_at_first_sight(line: str) -> None:
    f, s, primary = _decisions(line + "\n")
    assert (f, s) == ("STOP", "STOP"), primary
    assert primary.recoverability == "config"


@pytest.mark.parametrize(
    "line",
    [
        "ValueError: File data/train.json not found.",
        "ValueError: `FlatParameter` requires uniform `requires_grad`",
        "ValueError: bf16 mixed precision requires PyTorch >= 1.10 and a supported device.",
    ],
)
def test_value_error_about_data_or_code_restarts_once(line: str) -> None:
    f, s, primary = _decisions(line + "\n")
    assert (f, s) == ("RESTART", "STOP"), primary


# ---------------------------------------------------------------- own module by name
def test_import_of_a_project_folder_name_is_the_users_own_module() -> None:
    # the reporter pasted the import line and the error only (no `File` frame)
    own = "    from models import build_model\nModuleNotFoundError: No module named 'models'\n"
    third = "    import flash_attn\nModuleNotFoundError: No module named 'flash_attn'\n"
    assert _decisions(own)[:2] == ("STOP", "STOP")
    assert _decisions(third)[:2] == ("RESTART", "STOP")


def test_own_folder_name_raised_inside_a_library_is_not_the_users_module() -> None:
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/somepkg/__init__.py", line 3, in <module>\n'
        "ModuleNotFoundError: No module named 'utils'\n"
    )
    assert _decisions(tb)[:2] == ("RESTART", "STOP")


# ---------------------------------------------------------------- scheduler time limits
@pytest.mark.parametrize(
    "line",
    [
        "MOAB_INFO:  job exceeded wallclock limit",  # PBS/Moab mail
        "job 1234.1 exceeded hard wallclock time - initiate terminate method",  # Grid Engine
        "Warning  DeadlineExceeded  job/train-llm  Job was active longer than specified deadline",
        "TERM_OWNER: job killed by owner.",  # LSF bkill
    ],
)
def test_other_schedulers_time_limits_and_cancellations_stop(line: str) -> None:
    f, s, primary = _decisions(line + "\n")
    assert (f, s) == ("STOP", "STOP"), primary
    assert primary.recoverability == "terminated"


# ---------------------------------------------------------------- workload words
@pytest.mark.parametrize(
    "line",
    [
        # torch.distributed API misuse, as a bare error line
        "RuntimeError: Default process group has not been initialized, please make sure to "
        "call init_process_group.",
        # Habana's PT bridge failing to compile the job's graph (`[rankN]:` torchrun layout)
        "[rank0]: RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_BRIDGE Exception in Lowering "
        "thread... Graph compile failed. synStatus=26 [Generic failure].",
    ],
)
def test_api_advice_and_graph_compile_failures_lean_workload(line: str) -> None:
    f, s, primary = _decisions(line + "\n")
    assert (f, s) == ("RESTART", "STOP"), primary
    assert primary.domain == "workload" and "workload word" in (primary.structural or "")


# ---------------------------------------------------------------- `Rank N: ` prefix
def test_rank_colon_prefix_names_the_rank() -> None:
    # a worker wrapper's own label in front of each line (as `[rankN]:`, without brackets)
    log = (
        "Rank 2: Traceback (most recent call last):\n"
        'Rank 2:   File "/home/me/train.py", line 5, in <module>\n'
        "Rank 2: IndexError: list index out of range\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "STOP"), primary
    assert primary.rank == 2 and primary.rank_source == "prefix"


# ---------------------------------------------------------------- GPU/build arch mismatch
def test_arch_incompatibility_warning_is_a_workload_root() -> None:
    # torch.multiprocessing.spawn layout: Python echoes the warning's source line, then the
    # spawned process 0 fails with no error line of its own in the excerpt
    log = (
        "  warnings.warn(incompatible_device_warn.format(device_name, capability, "
        '" ".join(arch_list), device_name))\n'
        "torch.multiprocessing.spawn.ProcessRaisedException: \n"
        "\n"
        "-- Process 0 terminated with the following error:\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "STOP"), primary
    assert primary.failure_class == "cuda_kernel_error" and primary.rank == 0


# ---------------------------------------------------------------- Horovod's runner summary
def test_horovod_runner_names_the_first_failed_process() -> None:
    # horovodrun (gloo) under Determined's log prefix: `Process name: N` without Open MPI's
    # `[[job,step],N]`
    log = (
        "|| RuntimeError: Horovod detected that one or more processes exited with non-zero "
        "status, thus causing the job to be terminated. The first process to do so was\n"
        "|| Exit code: 1\n"
        "|| Process name: 1\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "RESTART"), primary  # no cause shown
    assert primary.rank == 1 and primary.rank_source == "mpirun"


@pytest.mark.parametrize("tag", ["[Rank 3] ", "[rank: 3] "])
def test_bracketed_rank_tags_without_colon_are_prefixes(tag: str) -> None:
    # DeepSpeed's `[Rank N] ` and Lightning's `[rank: N] ` in front of a worker's lines
    log = (
        f"{tag}Traceback (most recent call last):\n"
        f'{tag}  File "/home/me/train.py", line 5, in <module>\n'
        f"{tag}KeyError: 'x'\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "STOP"), primary
    assert primary.rank == 3 and primary.rank_source == "prefix"


def test_config_words_with_an_infrastructure_word_are_not_a_config_error() -> None:
    # a config file on a network filesystem that could not be read: never STOP at first sight
    line = (
        "ValueError: could not load the config from /mnt/shared/run.yaml: connection reset by peer"
    )
    first, _ = _two(line + "\n")
    # not a config error: RESTART at first sight (the ValueError row's own rule decides the
    # recurrence, as before this rule)
    assert first.decision == "RESTART", first.primary  # type: ignore[attr-defined]
    assert first.primary.recoverability != "config"  # type: ignore[attr-defined]


# ---------------------------------------------------------------- after holdout6 (issue 24)
def test_a_node_marked_dead_wins_over_the_later_remote_error() -> None:
    # Ray's layout: the monitor's line, then the driver's RayGetError traceback (a library's
    # Python raise that alone leans workload): the lost node is the root, never a STOP
    log = (
        "The node with node id: 8c3e and address: 10.0.0.5 has been marked dead because the "
        "detector has missed too many heartbeats from it.\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 30, in <module>\n'
        "    results = ray.get([a.train.remote() for a in actors])\n"
        '  File "/usr/lib/python3/site-packages/ray/worker.py", line 900, in get\n'
        "    raise value\n"
        "ray.exceptions.RayTaskError: Could not get the result of the task: it failed with:\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "RESTART"), primary
    assert primary.failure_class == "node_failure" and primary.domain == "infrastructure"


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        ("_open_zipfile_writer", "RuntimeError: File out/ckpt/epoch_3.pt cannot be opened."),
        ("save_checkpoint", "RuntimeError: unable to write to file </torch_123_456>"),
    ],
)
def test_a_file_writer_that_cannot_open_its_file_leans_infrastructure(
    frame: str, message: str
) -> None:
    # torch.save layout after progress: the user's save call, torch's writer frames, then a
    # RuntimeError that no row names: the filesystem said no (full disk), not the code
    log = (
        "Epoch 3, average loss: 0.0501\n"
        "Traceback (most recent call last):\n"
        '  File "/work/train.py", line 227, in train\n'
        "    torch.save(state, path)\n"
        f'  File "/usr/lib/python3.9/site-packages/torch/serialization.py", line 309, in {frame}\n'
        "    return container(name_or_buffer)\n"
        f"{message}\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "RESTART"), primary
    assert primary.domain == "infrastructure" and "file writer" in primary.structural


def test_a_cannot_open_message_outside_a_writer_is_not_made_infrastructure() -> None:
    # the same words raised while READING (a dataset's own loader) are no write failure
    log = (
        "Traceback (most recent call last):\n"
        '  File "/work/train.py", line 20, in load\n'
        "    rows = read_rows(path)\n"
        "RuntimeError: File data/train.bin cannot be opened.\n"
    )
    _, _, primary = _decisions(log)
    assert primary.domain != "infrastructure", primary


@pytest.mark.parametrize(
    ("line", "klass", "rank", "want"),
    [
        # new launcher (paddle.distributed.launch 2.3+): code -9 = SIGKILL, a root
        ("code -9 log ./debug/workerlog.0", "killed_sigkill", 0, ("RESTART", "RESTART")),
        # -6 (SIGABRT, usually a follow-on abort) only says that the worker failed
        ("code -6 log log/default.0.log", "process_exit", 0, ("RESTART", "RESTART")),
        ("code -11 log log/workerlog.0", "segfault", 0, ("RESTART", "RESTART")),
    ],
)
def test_paddle_container_summary_names_the_failed_rank(
    line: str, klass: str, rank: int, want: tuple[str, str]
) -> None:
    log = (
        "LAUNCH INFO 2022-10-25 15:17:31,067 Pod failed\n"
        "LAUNCH ERROR 2022-10-25 15:17:31,067 Container failed !!!\n"
        f"Container rank {rank} status failed cmd ['/usr/bin/python3.8', '-u', 'train.py', "
        f"'-c', 'cfg.yml'] {line}\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == want, primary
    assert primary.failure_class == klass and primary.rank == rank
    assert primary.rank_source == "paddle"


def test_paddle_container_exit_keeps_the_workers_own_error_as_root() -> None:
    # workerlog's traceback pasted above the launcher's summary: the ValueError is the root
    # and takes the container's rank (code 1 is a cascade naming it)
    log = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in <module>\n'
        "    idx = np.argsort(scores)\n"
        "ValueError: operands could not be broadcast together with shapes (3,) (4,)\n"
        "LAUNCH ERROR 2022-11-02 14:50:28,627 Container failed !!!\n"
        "Container rank 0 status failed cmd ['/usr/bin/python', '-u', 'train.py'] code 1 "
        "log log/workerlog.0\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "STOP"), primary
    assert primary.pattern_id.startswith("py.") and primary.rank == 0


def test_paddle_launch_utils_abort_names_the_trainer_rank() -> None:
    # the old launch_utils layout: no cause shown, so RESTART both times, rank named
    log = (
        "INFO 2021-05-24 17:17:14,611 launch_utils.py:307] terminate all the procs\n"
        "ERROR 2021-05-24 17:17:14,611 launch_utils.py:545] ABORT!!! Out of all 8 trainers, "
        "the trainer process with rank=[5] was aborted. Please check its log.\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "RESTART"), primary
    assert primary.rank == 5 and primary.rank_source == "paddle_trainer"


@pytest.mark.parametrize(
    ("spelling", "klass"),
    [
        ("signal 4 (Illegal instruction: 4)", "illegal_instruction"),
        ("signal 11 (Segmentation fault: 11)", "segfault"),
        ("signal 9 (Killed: 9)", "killed_sigkill"),
    ],
)
def test_mpirun_signal_with_its_number_names_the_rank(spelling: str, klass: str) -> None:
    # Open MPI on macOS / BSD spells strsignal() with the number
    log = (
        "Primary job  terminated normally, but 1 process returned\n"
        "a non-zero exit code. Per user-direction, the job has been aborted.\n"
        f"mpirun noticed that process rank 2 with PID 0 on node mbp exited on {spelling}.\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "RESTART"), primary
    assert primary.failure_class == klass and primary.rank == 2


def test_a_device_assert_in_any_cu_kernel_is_a_workload_bug() -> None:
    # Paddle/phi's layout (no `block: [..], thread: [..]`), repeated per thread
    line = (
        "Error: /paddle/paddle/phi/kernels/gpu/softmax_kernel.cu:412 Assertion `false` failed. "
        "The value of label expected >= 0 and < 10, but got 12. Please check label value.\n"
    )
    f, s, primary = _decisions(line * 3)
    assert (f, s) == ("RESTART", "STOP"), primary
    assert primary.failure_class == "cuda_device_assert"


def test_a_quoted_rank_prefix_behind_a_wrapper_names_the_rank() -> None:
    # SageMaker's layout: its summary wraps the script's stderr in a quoted ErrorMessage;
    # the summary is a cascade, the quoted `[rank3]:` line is the root on rank 3
    log = (
        "AlgorithmError: ExecuteUserScriptError: ExitCode 1 ErrorMessage \n"
        '"[rank3]: ValueError: Caught ValueError in DataLoader worker process 0.\n'
        "[rank3]: Original Traceback (most recent call last)\n"
        '[rank3]:   File "/opt/conda/lib/python3.11/site-packages/torch/utils/data/_utils/'
        'worker.py", line 309, in _worker_loop\n'
        "[rank3]:     data = fetcher.fetch(index)\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "STOP"), primary
    assert primary.rank == 3 and primary.failure_class == "python_value_error"


def test_a_task_exception_quoted_by_its_repr_keeps_its_type_lean() -> None:
    # Dask's worker log under docker compose's `<service> | ` tag
    log = "".join(
        f"daskcluster-worker-{n}     | {text}\n"
        for n in (1, 2)
        for text in (
            "2022-11-13 17:01:17,386 - distributed.worker - WARNING - Compute Failed",
            "Function:  dispatch_with_ddp",
            "Exception: 'AssertionError()'",
        )
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "STOP"), primary
    assert primary.domain == "workload"


# ---------------------------------------------------------------- after real_train2 (issue 24)
def test_an_object_dump_names_the_exception_type_of_a_programming_error() -> None:
    # CPython's object dump after `Original exception was:` (a failing excepthook, a fatal
    # error): the exception is only in `object type name` / `object repr`, no `X: msg` line
    log = (
        "Original exception was:\n"
        "Traceback (most recent call last):\n"
        "object address  : 0x7f00aa001122\n"
        "object refcount : 3\n"
        "object type     : 0x55aa00112233\n"
        "object type name: KeyError\n"
        "object repr     : KeyError('pixel_values')\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "STOP"), primary
    assert primary.domain == "workload" and primary.pattern_id == "py.object_dump_programming_error"


def test_an_object_dump_of_another_type_is_not_made_a_workload_bug() -> None:
    log = "object type name: OSError\nobject repr     : OSError(5, 'Input/output error')\n"
    f, s, _ = _decisions(log)
    assert (f, s) == ("RESTART", "RESTART")


def test_a_ray_task_error_wrapping_a_programming_error_is_the_task_codes_bug() -> None:
    # Ray Train's driver: the trainer actor's and the worker's RayTaskError(<type>) lines,
    # the wrapped type only in parentheses (its message is further down, often cut)
    log = (
        "ray.exceptions.RayTaskError(AttributeError): ray::_Inner.train() (pid=811, ip=10.0.0.2,"
        " actor_id=aa01, repr=TorchTrainer)\n"
        '  File "/usr/lib/python3.10/site-packages/ray/tune/trainable/trainable.py", line 375,'
        " in train\n"
        "    raise skipped from exception_cause(skipped)\n"
        "ray.exceptions.RayTaskError(AttributeError): ray::_RayTrainWorker__execute.get_next()"
        " (pid=815, ip=10.0.0.3)\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "STOP"), primary
    assert primary.pattern_id == "ray.task_error_attribute_error"
    assert primary.failure_class == "python_attribute_error"


def test_a_ray_task_error_wrapping_a_runtime_error_with_infrastructure_words_restarts() -> None:
    log = (
        "ray.exceptions.RayTaskError(RuntimeError): ray::_RayTrainWorker__execute() (pid=9,"
        " ip=10.0.0.4)\n"
        "RuntimeError: NCCL communicator was aborted on rank 3: a network connection was lost\n"
    )
    f, s, _ = _decisions(log)
    assert (f, s) == ("RESTART", "RESTART")


def test_a_coordination_service_task_lost_wins_over_a_later_program_error() -> None:
    # JAX multi-host: the coordination service marks a host's task ERROR (heartbeat timeout);
    # a host's later ValueError while its peers vanish must not make it a workload STOP
    log = (
        "I0301 10:00:00.100000 139 trainer.py:501] Training: step 40\n"
        "2024-03-01 10:02:00.000001: E external/xla/xla/tsl/distributed_runtime/coordination/"
        "coordination_service.cc:954] /job:jax_worker/replica:0/task:7 has been set to ERROR in"
        " coordination service: UNAVAILABLE: Task /job:jax_worker/replica:0/task:7 heartbeat"
        " timeout. This indicates that the remote task has failed, got preempted, or crashed"
        " unexpectedly.\n"
        "ValueError: expected 16 shards, got 14\n"
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "RESTART"), primary
    assert primary.failure_class == "node_failure" and primary.domain == "infrastructure"


def _determined(rank: int, text: str) -> str:
    # Determined's log shipper: `<>  [time] <container id> [rank=N] || <the worker's line>`
    return f"<>        [2021-12-07 10:40:07] 152337f9 [rank={rank}] || {text}\n"


def test_determined_rank_tag_behind_its_lead_names_the_rank_and_exposes_the_error() -> None:
    log = (
        _determined(0, "2021-12-07 10:40:07.163460: I tensorflow/core/platform/cpu_utils.cc:112]")
        + _determined(1, "Traceback (most recent call last):")
        + _determined(1, '  File "/run/determined/workdir/model_def.py", line 42, in build_data')
        + _determined(1, '    labels = batch["labels"]')
        + _determined(1, "KeyError: 'labels'")
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "STOP"), primary  # before: no evidence, restarted forever
    assert primary.rank == 1 and primary.failure_class == "python_key_error"


def test_determined_rank_tag_on_an_infrastructure_error_restarts() -> None:
    log = _determined(
        3,
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970,"
        " remote process exited or there was a network error, NCCL version 2.18.1",
    )
    f, s, primary = _decisions(log)
    assert (f, s) == ("RESTART", "RESTART"), primary
    assert primary.rank == 3


def test_a_flight_recorder_culprit_without_a_line_of_its_own_is_the_root() -> None:
    """Mirrors a gloo collective timeout under `relaunch run`: rank 0 times out in the
    all-reduce (a cascade), rank 1 never entered it and was stopped silently; the dumps
    name rank 1. Without dumps the launcher's first failing rank is blamed."""
    from relaunch.restart_agent import LogScanner, decide

    log = (
        b"[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78]"
        b" Timed out waiting 3000ms for recv operation to complete\n"
    )
    scanner = LogScanner()
    scanner.feed(log)
    evidence = scanner.finish()
    with_dumps = decide(evidence, (), fr_culprit_ranks=[1]).to_dict()
    assert with_dumps["primary"]["rank"] == 1
    assert with_dumps["primary"]["rank_source"] == "flight_recorder"
    assert with_dumps["decision"] == "RESTART"
    without = decide(evidence, ()).to_dict()
    assert (without["primary"] or {}).get("rank") != 1


def test_a_killed_flight_recorder_culprit_keeps_its_signals_class() -> None:
    """A rank killed from outside (SIGKILL: the OOM killer) writes no dump and the dumps name
    it as the missing culprit: blamed with its signal's class, not as a hang; with several
    culprits the rank the launcher saw fail first is the one blamed."""
    from relaunch.restart_agent import LogScanner, decide
    from tests._agent_helpers import fact

    log = (
        b"[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78]"
        b" Timed out waiting 3000ms for recv operation to complete\n"
        + fact("rank_exit", rank=2, exitcode=-9, signal="SIGKILL", first=True, t_s=3.0).encode()
        + fact("rank_exit", rank=0, exitcode=1, t_s=9.0).encode()
    )
    scanner = LogScanner()
    scanner.feed(log)
    v = decide(scanner.finish(), (), fr_culprit_ranks=[1, 2]).to_dict()
    assert v["primary"]["rank"] == 2
    assert v["primary"]["failure_class"] != "hang_detected", v["primary"]
    assert "SIGKILL" in v["primary"]["text"]


# ---------------------------------------------------------------- after holdout7 (issue 24)
def test_where_a_cycle_starts_is_not_progress_so_a_startup_oom_stops_on_its_recurrence() -> None:
    # detectron2's train loop announces its start point; an OOM in the first backward right
    # after it is an OOM before the first iteration (policy: RESTART, then STOP)
    text = (
        "[12/26 14:49:07 d2.engine.train_loop]: Starting training from iteration 0\n"
        "Traceback (most recent call last):\n"
        '  File "/app/train_net.py", line 140, in train\n'
        "    losses.backward()\n"
        "RuntimeError: CUDA out of memory. Tried to allocate 98.00 MiB (GPU 0; 5.81 GiB total"
        " capacity; 3.61 GiB already allocated; 77.75 MiB free)\n"
    )
    first, second, primary = _decisions(text)
    assert (first, second) == ("RESTART", "STOP"), primary
    # the same OOM after real iterations is fragmentation-prone: retryable on the recurrence
    progressed = "iteration: 57, loss=3.2\n" + text.replace("Starting training", "Resuming")
    assert _decisions(progressed)[:2] == ("RESTART", "RESTART")


def test_a_rank_prefixed_traceback_that_lost_its_line_breaks_is_read_as_its_lines() -> None:
    text = (
        '[rank5]: Traceback (most recent call last): [rank5]: File "/work/app/cli.py", line 5,'
        ' in <module> [rank5]: main() [rank5]: File "/work/app/trainer.py", line 311, in'
        " split [rank5]: if name.startswith(llm): [rank5]: TypeError: startswith first arg"
        " must be str or a tuple of str, not list\n"
    )
    first, second, primary = _decisions(text)
    assert (first, second) == ("RESTART", "STOP")
    assert primary.rank == 5 and primary.failure_class == "python_type_error", primary
    assert primary.user_frame == "/work/app/trainer.py:311"


def test_a_message_quoting_one_rank_prefix_is_still_one_line() -> None:
    # two `[rankN]:` inside one message are no flattened paste (it takes three or more)
    text = "[rank1]: RuntimeError: peer [rank0]: closed the connection (Connection reset by peer)\n"
    first, second, primary = _decisions(text)
    assert (first, second) == ("RESTART", "RESTART") and primary.rank == 1, primary


@pytest.mark.parametrize(
    "tag", ["(EmbodiedFSDPActor pid=9671) ", "(pid=12) ", "(RayTrainWorker pid=7, ip=10.0.0.3) "]
)
def test_a_ray_worker_tag_is_dropped_like_a_stream_tag(tag: str) -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/checkpoint/'
        'default_planner.py", line 364, in create_default_local_load_plan',
        "    raise ValueError(",
        "ValueError: Size mismatch between saved torch.Size([257152, 2048]) and current:"
        " torch.Size([131661824]) for model.embed_tokens.weight",
    ]
    first, second, primary = _decisions("".join(tag + line + "\n" for line in lines))
    assert (first, second) == ("RESTART", "STOP"), primary
    assert primary.domain == "workload" and primary.rank is None, primary


def test_ddp_model_that_differs_between_ranks_is_a_workload_bug() -> None:
    text = (
        "[rank2]: RuntimeError: [2]: params[32] in this process with sizes [40960, 512] appears"
        " not to match sizes of the same param in process 0.\n"
    )
    first, second, primary = _decisions(text)
    assert (first, second) == ("RESTART", "STOP")
    assert primary.failure_class == "ddp_model_mismatch" and primary.rank == 2, primary


def test_xmp_spawn_names_the_process_whose_traceback_follows() -> None:
    text = (
        "Exception in device=TPU:3:\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.8/dist-packages/torch_xla/distributed/'
        'xla_multiprocessing.py", line 231, in _start_fn\n'
        "    fn(gindex, *args)\n"
        '  File "/content/app/train.py", line 112, in init\n'
        "    assert world_size == args.world_size\n"
        "AssertionError\n"
    )
    first, second, primary = _decisions(text)
    assert (first, second) == ("RESTART", "STOP")
    assert primary.rank == 3 and primary.rank_source == "spawn", primary
    # two processes raising: no single failed process, no rank guessed
    two = text + text.replace("device=TPU:3", "device=TPU:5")
    assert _decisions(two)[2].rank is None


# ------------------------------------------------ written before holdout8 (issue 24, blind)
STARTUP_OOM = (
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 88, in train\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a"
    " total capacity of 79.15 GiB of which 1.20 GiB is free.\n"
)


@pytest.mark.parametrize(
    "before",
    [
        "  0%|          | 0/375 [00:00<?, ?it/s]\n",  # HF Trainer's bar, drawn before step 1
        "Epoch 0:   0%|          | 0/250 [00:00<?, ?it/s]\n",  # Lightning, epoch 0 at 0
        "Sanity Checking DataLoader 0:  50%|█████     | 1/2 [00:01<00:01,  0.80it/s]\n",
        "Epoch 1/10\n",  # Keras' (and many loops') header before the first epoch's first step
        "Train: 0 [   0/1251 (  0%)]  Loss: 6.9301 (6.9301)  Time: 5.120s\n",  # timm, batch 0
    ],
)
def test_a_bar_or_header_drawn_before_the_first_step_is_not_progress(before: str) -> None:
    first, second, primary = _decisions(before + STARTUP_OOM)
    assert (first, second) == ("RESTART", "STOP"), primary


@pytest.mark.parametrize(
    "before",
    [
        " 12%|█▏        | 45/375 [01:10<08:30,  1.55s/it]\n",
        "Epoch 3:   0%|          | 0/250 [00:00<?, ?it/s]\n",  # three epochs were done
        "2024-03-01 10:00:00,000 - mmdet - INFO - Epoch [1][50/1000]\tlr: 1.000e-02, loss: 1.23\n",
        "03/01 10:00:00 - mmengine - INFO - Iter(train) [  50/80000]  lr: 1.0000e-02\n",
        "[03/01 10:00:00 d2.utils.events]:  eta: 1 day, 2:00:00  iter: 19  total_loss: 2.345\n",
        "Epoch 2/10\n",  # the first epoch is done
    ],
)
def test_a_step_taken_is_progress_so_the_oom_stays_retryable(before: str) -> None:
    assert _decisions(before + STARTUP_OOM)[:2] == ("RESTART", "RESTART")


def test_a_runtime_status_code_of_a_fault_is_no_workload_lean() -> None:
    # torch_xla's TPU runtime, raised through its Python (a library frame alone leans
    # workload): the absl status UNKNOWN names no program fault, so no STOP on the recurrence
    text = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.10/site-packages/torch_xla/core/xla_model.py", line 88, in'
        " get_xla_supported_devices\n"
        "RuntimeError: Bad StatusOr access: UNKNOWN: TPU initialization\n"  # (cut there)
    )
    assert _decisions(text)[:2] == ("RESTART", "RESTART")


def test_a_root_cause_entry_cut_after_its_rank_line_still_names_the_rank() -> None:
    # an excerpt that ends inside torch elastic's summary, right after the Root Cause
    # entry's `rank` line: the first observed failure's rank is known, its exit code not
    cut = SIGBUS_SUMMARY.split("Root Cause")[0].replace("exitcode  : -7", "exitcode  : 1")
    cut = cut.replace("traceback : Signal 7 (SIGBUS) received by PID 467398", "traceback : x")
    text = (
        cut
        + "Root Cause (first observed failure):\n[0]:\n  time      : 2024-12-31_16:45:51\n"
        + "  host      : server\n  rank      : 3 (local_rank: 3)\n"
    )
    first, second, primary = _decisions(text)
    assert primary.rank == 3, primary  # type: ignore[attr-defined]
    assert (first, second) == ("RESTART", "RESTART")  # no cause shown: never stops


# ------------------------------------------ after holdout8's blind run (issue 24), general
def _tb(error: str, frames: tuple[tuple[str, str], ...], prefix: str = "") -> str:
    out = [f"{prefix}Traceback (most recent call last):"]
    out += [f'{prefix}  File "{path}", line 10, in {fn}' for path, fn in frames]
    return "\n".join([*out, prefix + error]) + "\n"


USER_FRAME = ("/home/u/train.py", "main")
HOROVOD_OPS = ("/usr/lib/python3.9/site-packages/horovod/torch/mpi_ops.py", "synchronize")
C10D_SETUP = (
    "/usr/lib/python3.8/site-packages/torch/distributed/distributed_c10d.py",
    "_new_process_group_helper",
)


@pytest.mark.parametrize(
    ("status", "cls", "decisions"),
    [
        ("137", "killed_sigkill", ("RESTART", "RESTART")),  # 128 + 9
        ("139", "segfault", ("RESTART", "RESTART")),  # 128 + 11
        ("1", "mpi_process_exit", ("RESTART", "RESTART")),  # failed: says which, not why
    ],
)
def test_horovod_runner_names_the_process_and_its_status(
    status: str, cls: str, decisions: tuple[str, str]
) -> None:
    # horovodrun (gloo): `Process N exit with status code C.`, then the runner's own
    # traceback raising its summary (a library frame: it must not lean workload)
    text = (
        f"Process 3 exit with status code {status}.\n"
        + _tb(
            "RuntimeError: Horovod detected that one or more processes exited with non-zero "
            "status, thus causing the job to be terminated. The first process to do so was:",
            (("/usr/lib/python3.6/site-packages/horovod/runner/gloo_run.py", "launch_gloo"),),
        )
        + "Process name: worker-1[0]\n"
        + f"Exit code: {status}\n"
    )
    first, second, primary = _decisions(text)
    assert (first, second) == decisions, primary
    assert (primary.failure_class, primary.rank) == (cls, 3), primary  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "error",
    [
        # TF / XRT status spelt in title case, raised through the user's own frame
        "RuntimeError: Aborted: Session 1a625b17752b2794 is not found.",
        "RuntimeError: Internal: Failed to connect to the TPU runtime",
        # NCCL's result string for a failed call, wrapped by Horovod
        "horovod.common.exceptions.HorovodInternalError: ncclAllReduce failed: unhandled cuda error",
    ],
)
def test_runtime_status_and_nccl_result_words_never_stop_on_a_recurrence(error: str) -> None:
    assert _decisions(_tb(error, (USER_FRAME, HOROVOD_OPS)))[:2] == ("RESTART", "RESTART")


@pytest.mark.parametrize(
    "text",
    [
        # the build lacks the requested backend (Windows: no NCCL): the job's launch code
        _tb(
            "RuntimeError: Distributed package doesn't have NCCL built in", (USER_FRAME, C10D_SETUP)
        ),
        # torch's collective fingerprint check, behind a logger's own lead
        "[RANK 1] 2026-05-19 10:10:29,701 [ERROR] circuit breaker OPEN: cuda_error - Detected"
        " mismatch between collectives on ranks. Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=101, OpType=ALLGATHER)\n",
        # Horovod's coordinator check, in a TF status type that names no program fault alone
        "[1,2]<stderr>:tensorflow.python.framework.errors_impl.FailedPreconditionError: "
        "Mismatched ALLREDUCE CPU/GPU device selection: One rank specified device GPU, but "
        "another rank specified device CPU.\n",
        # more processes than GPUs (a node that lost a GPU fails its health check instead)
        _tb("RuntimeError: CUDA error: invalid device ordinal", (USER_FRAME,), "[rank5]: "),
    ],
)
def test_launch_and_collective_bugs_stop_on_the_identical_recurrence(text: str) -> None:
    first, second, primary = _decisions(text)
    assert (first, second) == ("RESTART", "STOP"), primary
    assert primary.domain == "workload", primary  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text",
    [
        # TF 1's out-of-memory, its status type glued to `(see above for traceback)`
        "[1,1]<stderr>:ResourceExhaustedError (see above for traceback): OOM when allocating "
        "tensor with shape[2,1023,50257] and type float\n",
        # NCCL's unhandled cuda error, whose `Last error:` says its CUDA call ran out of memory
        _tb(
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
            (USER_FRAME,),
        )
        + "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
        + "Cuda failure 2 'out of memory'\n",
    ],
)
def test_an_out_of_memory_in_other_words_is_the_startup_oom(text: str) -> None:
    first, second, primary = _decisions(text)
    assert primary.failure_class == "cuda_oom", primary  # type: ignore[attr-defined]
    assert (first, second) == ("RESTART", "STOP"), primary


def test_open_mpi_tag_behind_its_timestamp_names_the_rank() -> None:
    # `mpirun --timestamp-output`: the time glued to the tag
    text = (
        "Mon Sep 24 14:28:29 2018[1,0]<stderr>:*** SIGSEGV (@0x8) received by PID 33946 "
        "(TID 0x7f58d53a8700) from PID 8; stack trace: ***\n"
    )
    first, second, primary = _decisions(text)
    assert (first, second, primary.rank) == ("RESTART", "RESTART", 0), primary  # type: ignore[attr-defined]


# ------------------------------- other frameworks' words (probed before holdout9, issue 24)
LIB_FRAME = ("/usr/lib/python3.10/site-packages/fw/core.py", "run")


@pytest.mark.parametrize(
    "error",
    [
        # TensorFlow's status types: the runtime's faults, named by the type alone
        "tensorflow.python.framework.errors_impl.InternalError: Failed to call ThenRnnForward",
        "tensorflow.python.framework.errors_impl.AbortedError: Session 12ab is not found.",
        "tensorflow.python.framework.errors_impl.DeadlineExceededError: Deadline Exceeded",
        # Ascend's runtime API failing with its error number (MindSpore)
        "RuntimeError: Call rt api rtStreamSynchronize failed, ret: 507011",
    ],
)
def test_other_runtimes_faults_never_stop_on_a_recurrence(error: str) -> None:
    assert _decisions(_tb(error, (USER_FRAME, LIB_FRAME)))[:2] == ("RESTART", "RESTART")


@pytest.mark.parametrize(
    "text",
    [
        _tb(
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
            "trying to allocate 17179869184 bytes.",
            (USER_FRAME, LIB_FRAME),
        ),
        _tb(
            "RuntimeError: Device(id:0) memory isn't enough and alloc failed, kernel name: "
            "Default/Conv2D-op1, alloc size: 2147483648B.",
            (USER_FRAME, LIB_FRAME),
        ),
        # Paddle raises Python's host-memory type for a GPU OOM; its summary says which
        _tb("MemoryError: ", (USER_FRAME, LIB_FRAME))
        + "\n--------------------------------------\nC++ Traceback (most recent call last):\n"
        + "0   paddle::framework::Executor::Run\n----------------------\n"
        + "Error Message Summary:\n----------------------\nResourceExhaustedError: \n\n"
        + "Out of memory error on GPU 0. Cannot allocate 1.203125GB memory on GPU 0.\n",
    ],
)
def test_other_frameworks_device_oom_is_the_startup_oom(text: str) -> None:
    first, second, primary = _decisions(text)
    assert primary.failure_class == "cuda_oom", primary  # type: ignore[attr-defined]
    assert (first, second) == ("RESTART", "STOP"), primary


# ------------------------------------------ after holdout9's blind run (issue 24), general
def test_an_accelerator_that_lost_its_initialised_state_never_stops() -> None:
    # TF on a TPU pod: the TPU system lost its initialised state mid-run (a status of the
    # program's own code family, `Failed precondition`, whose words name the device's state)
    text = "  (0) Failed precondition: The TPU system has not been initialized.\n"
    assert _decisions(text)[:2] == ("RESTART", "RESTART")


@pytest.mark.parametrize(
    ("text", "decisions"),
    [
        # XLA's reservation at the bottom of device memory: the device OOM (at startup)
        (
            "Exception in device=TPU:6: RESOURCE_EXHAUSTED: From /job:localservice/replica:0/task:0:\n"
            "  (0) RESOURCE_EXHAUSTED: Attempting to reserve 10.51G at the bottom of memory. That"
            " was not possible. There are 8.97G free, 0B reserved, and 8.97G reservable.\n",
            ("RESTART", "STOP"),
        ),
        # DeepSpeed's transformer kernel reporting its failed GEMM
        (
            "!!!! kernel execution error. (m: 768, n: 4608, k: 3072, error: 13)\n",
            ("RESTART", "STOP"),
        ),
        # NCCL's own argument check before it returns ncclInvalidArgument
        (
            "[1,1]<stdout>:slave1:126624:126758 [1] misc/argcheck.cc:39 NCCL WARN Broadcast : "
            "invalid root 0 (root should be in the 0..-1 range)\n",
            ("RESTART", "STOP"),
        ),
        # a configuration value the framework lists the valid choices for
        (
            "ValueError: You selected an invalid accelerator name: `accelerator='ddp'`. "
            "Available names are: cpu, cuda, hpu, ipu, mps, tpu.\n",
            ("STOP", "STOP"),
        ),
        # a relative import in a script run as a file: always the user's own package
        (
            _tb(
                "ImportError: attempted relative import with no known parent package",
                (("/home/u/proj/fme/train.py", "<module>"),),
            ),
            ("STOP", "STOP"),
        ),
    ],
)
def test_after_holdout9_shapes(text: str, decisions: tuple[str, str]) -> None:
    first, second, primary = _decisions(text)
    assert (first, second) == decisions, primary


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        # a summary whose node name was lost (`on node exited on`)
        (
            "mpirun noticed that process rank 0 with PID 0 on node exited on signal 4 (Illegal instruction).",
            0,
        ),
        # Paddle's launcher without the blank after the comma
        (
            "ABORT!!! Out of all 3 trainers,the trainer process with rank=[2] was aborted.Please check its log.",
            2,
        ),
    ],
)
def test_launcher_summaries_in_looser_spellings_name_the_rank(line: str, rank: int) -> None:
    first, second, primary = _decisions(line + "\n")
    assert (first, second) == ("RESTART", "RESTART")
    assert primary.rank == rank, primary  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text",
    [
        # Hydra refusing a command-line override (no traceback printed)
        "Could not override 'trainer.gpu'.\nTo append to your config use +trainer.gpu=8\n"
        "Key 'gpu' is not in struct\n    full_key: trainer.gpu\n    object_type=dict\n",
        # the run's YAML config does not parse
        _tb(
            'yaml.scanner.ScannerError: mapping values are not allowed here\n  in "configs/train.yaml",'
            " line 12, column 9",
            (USER_FRAME,),
        ),
    ],
)
def test_a_config_the_job_cannot_read_stops_at_first_sight(text: str) -> None:
    first, second, primary = _decisions(text)
    assert (first, second) == ("STOP", "STOP"), primary
    # a data file that does not parse is no config: probable workload (RESTART, then STOP)
    data = _tb(
        "pandas.errors.ParserError: Error tokenizing data. C error: Expected 2 fields in line 3",
        (USER_FRAME,),
    )
    assert _decisions(data)[:2] == ("RESTART", "STOP")


@pytest.mark.parametrize(
    "error",
    [
        # network words a socket, a fabric library or an object store use
        "RuntimeError: Transport endpoint is not connected",
        "OSError: No route to host",
        "RuntimeError: Host is down",
        "RuntimeError: fi_getinfo failed: No data available",
        "RuntimeError: [UCX] Transport retry count exceeded on mlx5_0:1/IB",
        "botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject"
        " operation (reached max retries: 4): Please reduce your request rate.",
        # a GPU that must be reset, an MPI library's internal failure, a locked shared file
        "RuntimeError: CUDA error: GPU requires reset",
        "mpi4py.MPI.Exception: MPI_ERR_OTHER: known error not in list",
        "sqlite3.OperationalError: database is locked",
    ],
)
def test_infrastructure_in_other_words_never_stops_on_a_recurrence(error: str) -> None:
    # each raised through a library's Python frame, which alone leans workload
    assert _decisions(_tb(error, (USER_FRAME, LIB_FRAME)))[:2] == ("RESTART", "RESTART")


def test_cublas_that_cannot_allocate_its_workspace_is_the_startup_oom() -> None:
    text = _tb(
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        (USER_FRAME, LIB_FRAME),
    )
    first, second, primary = _decisions(text)
    assert primary.failure_class == "cuda_oom", primary  # type: ignore[attr-defined]
    assert (first, second) == ("RESTART", "STOP")


@pytest.mark.parametrize(
    "line",
    [
        # autograd's and multiprocessing's own checks of how the program uses them
        "RuntimeError: Trying to backward through the graph a second time (or directly access"
        " saved tensors after they have already been freed).",
        "RuntimeError: one of the variables needed for gradient computation has been modified by"
        " an inplace operation",
        "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
        "multiprocessing, you must use the 'spawn' start method",
        "RuntimeError: It looks like your LightningModule has parameters that were not used in "
        "producing the loss returned by training_step.",
    ],
)
def test_programming_checks_without_a_traceback_lean_workload(line: str) -> None:
    # a bare line (no frames: nothing for the structural reading but its words)
    first, second, primary = _decisions(line + "\n")
    assert (first, second) == ("RESTART", "STOP"), primary


# ----------------------------------------- after holdout10's blind run (issue 24), general
def test_horovod_shut_down_is_a_cascade_and_the_summary_names_the_rank() -> None:
    # the ranks still in a collective report Horovod's shutdown; Open MPI's summary says
    # which process exited first; no cause is shown: RESTART, on that process's rank
    text = (
        "[1,1]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an exception"
        " on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after"
        " one of the ranks finished execution.\n"
        "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
        "the job to be terminated. The first process to do so was:\n\n"
        "  Process name: [[50371,1],0]\n  Exit code:    1\n"
    )
    first, second, primary = _decisions(text)
    assert (first, second) == ("RESTART", "RESTART"), primary
    assert (primary.failure_class, primary.rank) == ("horovod_shutdown", 0), primary  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "decisions", "rank"),
    [
        # Open MPI cannot find the program it was told to run (the launch command's fault)
        (
            "mpirun was unable to find the specified executable file, and therefore\n"
            "did not launch the job.  This error was first reported for process\n"
            "rank 0; it may have occurred for other processes as well.\n",
            ("RESTART", "STOP"),
            0,
        ),
        # TF's title-case `Invalid argument:` status: the program's (an XLA compile limit)
        (
            "  (0) Invalid argument: Computation requires more parameters (732) than supported "
            "(limit 236).\n",
            ("RESTART", "STOP"),
            None,
        ),
        # torch_xla's `Unknown device` raised in the model's code
        (_tb("RuntimeError: Unknown device", (USER_FRAME, LIB_FRAME)), ("RESTART", "STOP"), None),
    ],
)
def test_after_holdout10_shapes(text: str, decisions: tuple[str, str], rank: int | None) -> None:
    first, second, primary = _decisions(text)
    assert (first, second) == decisions, primary
    assert primary.rank == rank, primary  # type: ignore[attr-defined]


# ------------------------------------------ review of this round's rules (false STOP guards)
@pytest.mark.parametrize(
    "text",
    [
        # a host MemoryError, then a pinned-memory thread's `CUDA error: out of memory`: the
        # later line is another report, not the MemoryError's own detail
        _tb("MemoryError", (USER_FRAME, LIB_FRAME))
        + "Exception in thread Thread-2 (_pin_memory_loop):\n"
        + _tb("RuntimeError: CUDA error: out of memory", (LIB_FRAME,)),
        # an NCCL error whose `Last error:` is a network fault; a later CUDA OOM line is not
        # its detail (another root class came between)
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970,"
        " unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
        "[rank3]: Last error:\n"
        "[rank3]: NET/IB : Got completion from peer 10.0.0.4<45123> with error 12, opcode 0,"
        " len 0, vendor err 129 (Recv)\n"
        "[rank3]: RuntimeError: CUDA error: out of memory\n",
        # a paste that lost a line break: the kernel's report is not dropped as a lead
        "node3 kernel: Out of memory: Killed process 1234 (python) total-vm:123kB - ValueError:"
        " x\n",
    ],
)
def test_an_infrastructure_report_is_not_taken_over_by_a_later_line(text: str) -> None:
    assert _decisions(text)[:2] == ("RESTART", "RESTART")
