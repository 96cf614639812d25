"""Benchmark log shapes besides the default one (`tests/fixtures/make_logs.write_log`).

- `noisy`: 20% warning lines holding "error" substrings the way real frameworks print them
  (`is error-prone`, `errors='ignore'`, `error_handler`, `ErrorCode`, `decode errors`),
  40% Megatron progress lines, 40% NCCL INFO lines, from 1,024 ranks with numbers that vary
  per line; then a CUDA error + NCCL watchdog cascade (the expected primary).
- `dense`: nothing but failure output: every rank printing a traceback and an error line
  (RuntimeError / NCCL error / `[Rank N]` watchdog / ValueError / KeyError) with numbers that
  vary per line, round after round; then the same CUDA cascade.

Deterministic for a seed. Used by `bench/analyze_bench.py` and the scanner's equivalence
tests (small sizes there).
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = "/usr/local/lib/python3.11/site-packages"


def make_logs():  # a module loaded from a file path
    spec = importlib.util.spec_from_file_location(
        "make_logs", ROOT / "tests" / "fixtures" / "make_logs.py"
    )
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _warning(rnd: random.Random, r: int) -> str:
    k = rnd.randrange(6)
    n = rnd.randrange(10**6)
    if k == 0:
        return (
            f"{SITE}/transformers/modeling_utils.py:{4000 + n % 900}: UserWarning: passing"
            f" `position_ids` together with a packed batch is error-prone; layer {n % 96}"
            " recomputes them"
        )
    if k == 1:
        return (
            f"{SITE}/datasets/arrow_reader.py:{100 + n % 300}: UserWarning: decoding shard"
            f" part-{n % 4096:05d}.arrow with errors='ignore' dropped {n % 977} bytes"
        )
    if k == 2:
        return (
            f"[W1202 10:{n % 60:02d}:{n % 59:02d}.{n:06d} {3000 + r} ProcessGroupNCCL.cpp:"
            f"{900 + n % 50}] Warning: error_handler of process group {n % 8} is SkipCleanUp"
            " (TORCH_NCCL_ASYNC_ERROR_HANDLING=3); errors will not tear down the job"
        )
    if k == 3:
        return (
            f"{SITE}/torch/_dynamo/variables/builtin.py:{1000 + n % 800}: UserWarning: Graph"
            f" break in user code at /work/model.py:{n % 500}: call to ErrorCode.from_status"
            f" ({n % 64}) is not supported, falling back to eager"
        )
    if k == 4:
        return (
            f"{SITE}/torch/utils/data/dataloader.py:{600 + n % 90}: UserWarning: worker"
            f" {n % 16}: suppressed {n % 311} decode errors in the last {n % 1000} batches"
            " (see the worker log at DEBUG level)"
        )
    return (
        f"{SITE}/torch/autograd/graph.py:{700 + n % 80}: UserWarning: the loss scaler's"
        f" overflow check uses the default error tolerance {n % 7}e-06 (set"
        " rtol explicitly to silence this)"
    )


def _progress(rnd: random.Random, it: int) -> str:
    return (
        f" [2026-12-02 10:{it // 60 % 60:02d}:{it % 60:02d}] iteration {it:>8}/  500000 |"
        f" consumed samples: {it * 512:>12} | elapsed time per iteration (ms):"
        f" {800 + rnd.random() * 30:.1f} | lm loss: 2.{rnd.randrange(1000):03d}E+00 |"
        f" grad norm: 0.{rnd.randrange(1000):03d} | number of skipped iterations:   0 |"
    )


def _nccl_info(rnd: random.Random, r: int) -> str:
    return (
        f"node{r // 8:03d}:{4000 + r}:{5000 + r} [{r % 8}] NCCL INFO Channel"
        f" {rnd.randrange(32):02d}/32 : {r} {(r + 1) % 1024} [{rnd.randrange(8)}] ->"
        f" [{rnd.randrange(8)}] via P2P/IPC/read comm 0x{rnd.randrange(16**12):012x}"
    )


def _noisy_block(rnd: random.Random, ranks: int, n: int, it0: int) -> tuple[list[str], int]:
    lines = []
    it = it0
    for _ in range(n):
        r = rnd.randrange(ranks)
        k = rnd.random()
        if k < 0.2:
            text = _warning(rnd, r)
        elif k < 0.6:
            text = _progress(rnd, it)
            it += 1
        else:
            text = _nccl_info(rnd, r)
        lines.append(f"[rank{r}]: {text}")
    return lines, it


_FRAMES = (
    '  File "/work/train.py", line {a}, in <module>',
    "    main()",
    '  File "/work/train.py", line {b}, in main',
    "    loss = step(model, batch)",
    f'  File "{SITE}/torch/nn/modules/module.py", line {{c}}, in _call_impl',
    "    return forward_call(*args, **kwargs)",
)


def _error(rnd: random.Random, r: int, k: int) -> str:
    n = rnd.randrange(10**6)
    if k == 0:
        return (
            f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            f"NCCLUtils.hpp:{200 + n % 100}, unhandled system error (run with NCCL_DEBUG=INFO"
            f" for details), NCCL version 2.{n % 30}.{n % 9}"
        )
    if k == 1:
        return (
            f"RuntimeError: [Rank {r}] Watchdog caught collective operation timeout:"
            f" WorkNCCL(SeqNum={n}, OpType=ALLREDUCE, NumelIn={n * 8}, NumelOut={n * 8},"
            f" Timeout(ms)=600000) ran for {600000 + n % 1000} milliseconds before timing out."
        )
    if k == 2:
        return f"ValueError: sample {n} of shard part-{n % 4096:05d} has {n % 9000} tokens > 8192"
    if k == 3:
        return f"KeyError: 'layers.{n % 96}.mlp.dense_h_to_4h.weight_{n % 7}'"
    return (
        f"RuntimeError: Expected all tensors to be on the same device, but found at least two"
        f" devices, cuda:{r % 8} and cuda:{n % 8}! (when checking argument {n % 5} for addmm)"
    )


def _dense_block(rnd: random.Random, ranks: int) -> list[str]:
    """Every rank prints a traceback; the frames are those of the code path that failed (the
    same on every rank, as in real jobs), the error line's numbers vary per rank."""
    lines = []
    for r in range(ranks):
        p = f"[rank{r}]: "
        k = rnd.randrange(5)
        lines.append(p + "Traceback (most recent call last):")
        for f in _FRAMES:
            lines.append(p + f.format(a=300 + k, b=120 + 7 * k, c=1736 + k))
        lines.append(p + _error(rnd, r, k))
    return lines


def _write(
    path: str | Path, size: int, seed: int, ranks: int, block: Callable[[random.Random], bytes]
) -> int:
    """Write blocks (all distinct: numbers vary per line) until `size`, then the failure."""
    rnd = random.Random(seed)
    tail = (
        make_logs()
        .make_log("cuda_nccl_cascade", ranks, lines=200, seed=seed, start_iteration=10**6)
        .encode()
    )
    written = 0
    with open(path, "wb") as f:
        while written + len(tail) < size:
            blk = block(rnd)
            f.write(blk)
            written += len(blk)
        f.write(tail)
        written += len(tail)
    return written


def write_noisy(path: str | Path, size: int, ranks: int = 1024, seed: int = 0) -> int:
    state = {"it": 1}

    def block(rnd: random.Random) -> bytes:
        lines, state["it"] = _noisy_block(rnd, ranks, 4000, state["it"])
        return ("\n".join(lines) + "\n").encode()

    return _write(path, size, seed, ranks, block)


def write_dense(path: str | Path, size: int, ranks: int = 1024, seed: int = 0) -> int:
    return _write(
        path,
        size,
        seed,
        ranks,
        lambda rnd: ("\n".join(_dense_block(rnd, ranks)) + "\n").encode(),
    )


def _distinct_line(rnd: random.Random, ranks: int) -> str:
    """One error line no other line repeats (issue 26, item 8: the attacker's log)."""
    r = rnd.randrange(ranks)
    n = rnd.getrandbits(48)
    k = rnd.randrange(6)
    if k == 5:
        return f"[rank{r}]: RuntimeError: unexpected state {n:x} in module m{n % 977}.f{n % 313}"
    return f"[rank{r}]: " + _error(rnd, r, k)


def write_distinct(path: str | Path, size: int, ranks: int = 1024, seed: int = 0) -> int:
    """Every line a distinct error line (numbers and names vary per line, no tracebacks)."""
    return _write(
        path,
        size,
        seed,
        ranks,
        lambda rnd: ("\n".join(_distinct_line(rnd, ranks) for _ in range(2000)) + "\n").encode(),
    )


WRITERS: dict[str, Callable[..., int]] = {
    "noisy": write_noisy,
    "dense": write_dense,
    "distinct": write_distinct,
}
