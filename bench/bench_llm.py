"""Benchmark of the LLM enrichment's bounded model view and its cost to the verdict path.

Run from the repository root: `python bench/bench_llm.py [--lines N] [--repeat R]`.
Prints one JSON object. Every figure is a ratio against a baseline measured in the same
process on the same file:

- window: `prompt.build` (streaming window, token budget) against the naive way (read the
  whole log, split lines, slice the window) for a primary near the end of an N-line log —
  time and peak Python memory (tracemalloc);
- grounding: `grounding.check` of three citations against reading the whole log;
- verdict: `AttributionEngine.analyze_cycle` latency with an `EnrichmentListener` whose
  model takes 2 s, against the same engine without it (when the engine is importable);
- enrich: wall time of one `enrich()` against the loopback server with no model delay.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _timing import timed_median  # noqa: E402  (bench/ is on sys.path as the script dir)

from relaunch.restart_agent.llm import LLMConfig, enrich, grounding, prompt  # noqa: E402
from tests._llm_helpers import answer, make_verdict, write_log  # noqa: E402
from tests._llm_server import LLMServer  # noqa: E402


def _peak(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _naive_window(log: Path, center: int) -> list[str]:
    lines = log.read_bytes().decode("utf-8", errors="replace").splitlines()
    return lines[max(0, center - 61) : center + 30]


def _naive_lines(log: Path, wanted: list[int]) -> dict[int, str]:
    lines = log.read_bytes().decode("utf-8", errors="replace").splitlines()
    return {n: lines[n - 1] for n in wanted if 0 < n <= len(lines)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000, help="log lines before the failure")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    out: dict[str, Any] = {"lines": args.lines}
    with tempfile.TemporaryDirectory() as tmp:
        log, line = write_log(Path(tmp), before=args.lines, after=50)
        out["log_bytes"] = log.stat().st_size
        verdict = make_verdict(line)

        t_stream = timed_median(lambda: prompt.build(verdict, log, 8192), args.repeat)
        t_naive = timed_median(lambda: _naive_window(log, line), args.repeat)
        m_stream = _peak(lambda: prompt.build(verdict, log, 8192))
        m_naive = _peak(lambda: _naive_window(log, line))
        built = prompt.build(verdict, log, 8192)
        out["window"] = {
            "stream_s": round(t_stream, 4),
            "naive_s": round(t_naive, 4),
            "time_ratio_stream_over_naive": round(t_stream / t_naive, 3),
            "stream_peak_bytes": m_stream,
            "naive_peak_bytes": m_naive,
            "memory_ratio_naive_over_stream": round(m_naive / max(1, m_stream), 1),
            "prompt_estimated_tokens": built.estimated_tokens,
            "prompt_budget_tokens": built.budget.prompt_tokens,
        }

        answer_obj = json.loads(answer(line))
        wanted = [line, line - 1, line + 10]
        t_ground = timed_median(lambda: grounding.check(answer_obj, log), args.repeat)
        t_gnaive = timed_median(lambda: _naive_lines(log, wanted), args.repeat)
        out["grounding"] = {
            "stream_s": round(t_ground, 4),
            "naive_s": round(t_gnaive, 4),
            "time_ratio_stream_over_naive": round(t_ground / t_gnaive, 3),
        }

        server = LLMServer().start()
        try:
            key = Path(tmp) / "k"
            key.write_text("sk-bench\n")
            small_dir = Path(tmp) / "small"
            small_dir.mkdir()
            small, sline = write_log(small_dir)
            model = server.script([{"content": answer(sline)}])
            cfg = LLMConfig(server.base_url, model, str(key))
            sverdict = make_verdict(sline)
            enrich(sverdict, small, cfg)  # warm up the SDK import and the connection path
            t_enrich = timed_median(lambda: enrich(sverdict, small, cfg), args.repeat)
            out["enrich_loopback_s"] = round(t_enrich, 4)
            out["verdict"] = _verdict_latency(server, key, small, sline, args.repeat)
        finally:
            server.stop()
    print(json.dumps(out, indent=2))
    return 0


def _verdict_latency(
    server: LLMServer, key: Path, log: Path, line: int, repeat: int
) -> dict[str, Any]:
    try:
        from relaunch.attribution.core.engine import AttributionEngine
    except ImportError as exc:
        return {"skipped": f"relaunch.attribution.core.engine not importable: {exc}"}
    from relaunch.attribution.core.enrichment import EnrichmentListener
    from relaunch.storage import open_repository

    with tempfile.TemporaryDirectory() as tmp:
        repo = open_repository(f"sqlite:///{tmp}/b.db")
        model = server.script([{"content": answer(line), "delay": 2.0}])
        plain = AttributionEngine(repo)
        with_llm = AttributionEngine(repo)
        listener = EnrichmentListener(
            repo, LLMConfig(server.base_url, model, str(key), timeout_s=5)
        )
        with_llm.add_listener(listener)
        cycle = iter(range(1, 10_000))
        t_plain = timed_median(lambda: plain.analyze_cycle("bench-plain", next(cycle), log), repeat)
        t_llm = timed_median(lambda: with_llm.analyze_cycle("bench-llm", next(cycle), log), repeat)
        plain.close()
        with_llm.close()
        listener.close(timeout=repeat * 2.5 + 2)  # let the slow enrichments finish
        repo.close()
    return {
        "without_llm_s": round(t_plain, 4),
        "with_llm_listener_s": round(t_llm, 4),
        "ratio_with_over_without": round(t_llm / t_plain, 3),
        "model_delay_s": 2.0,
    }


if __name__ == "__main__":
    sys.exit(main())
