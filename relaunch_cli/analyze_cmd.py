"""`relaunch analyze LOG`: analyse one cycle log and print its STOP/RESTART verdict.

With `--job-id J` the job's earlier cycles in the history are what the policy sees (cycle
N sees the stored cycles < N): the history is `--db` > `$RELAUNCH_DB` > the default
`sqlite:///$RELAUNCH_HOME/relaunch.db`, the one `relaunch run` writes (printed once on
stderr). Only with `--db` is the verdict saved. Without `--cycle`, a log the history
already knows (its absolute path) is that cycle; otherwise, with `--db`, the job's next
cycle number is allocated. Without `--job-id` there is no history, and the output says so
(text: `stored:`; JSON: `history_db`).
`--format json` prints exactly one JSON object (`Verdict.to_dict()`, plus `job_id`,
`cycle` and `log` when saved); `--format text` is for people: verdict, why, evidence.

Exit codes: 0 a verdict was printed (STOP or RESTART: read the verdict, not the code);
2 bad input (usage, missing/unreadable log, directory, device, FIFO, binary file,
bad --cycle/--job-id, a half LLM configuration);
3 the database cannot be used (bad --db URL, unreachable server, locked or unwritable file).

LOG may be gzip-compressed (recognised by its magic bytes) or `-` for stdin; a binary
file is refused (exit 2; what counts as binary: relaunch_cli/log_source.py). Without
`--cycle`, the cycle number is allocated in the database (`allocate_cycle`), so concurrent
`analyze` runs on one job never share one. Text output escapes terminal control characters.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from relaunch.attribution.core.terminal import safe_line, safe_text
from relaunch.cli import llm_options
from relaunch.cli.budget_options import add_budget_arguments, budget_from_args
from relaunch.cli.cli_args import MAX_INT32, ArgumentParser, bounded_int
from relaunch.cli.errors import UserError
from relaunch.cli.log_source import ReadLog, read_log
from relaunch.storage import job_id as job_id_rule

EXIT_BAD_INPUT = 2
EXIT_DB = 3
FIRST_CYCLE = 0


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Analyse one cycle log and print a STOP/RESTART verdict.",
        epilog=(
            "exit codes: 0 verdict printed (either decision), 2 bad input, "
            "3 database unusable. See docs/storage.md."
        ),
    )
    p.add_argument(
        "log", metavar="LOG", help="the cycle log to analyse (gzip too; `-`: standard input)"
    )
    p.add_argument("--job-id", help="job the cycle belongs to (history key with --db)")
    p.add_argument(
        "--cycle",
        type=bounded_int(0, MAX_INT32),
        help=f"cycle number (0 to {MAX_INT32}); default with --db: the job's next cycle number",
    )
    p.add_argument(
        "--db",
        metavar="URL",
        help="SQLAlchemy URL of the history database (e.g. sqlite:///runs/relaunch.db); "
        "without it nothing is saved and history is empty",
    )
    p.add_argument("--format", choices=("json", "text"), default="text", help="output format")
    p.add_argument(
        "--allow-binary",
        action="store_true",
        help="analyse a file that looks binary instead of refusing it",
    )
    add_budget_arguments(p)
    llm_options.add_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    if args.job_id is not None and (problem := job_id_rule.problem(args.job_id)) is not None:
        raise UserError(f"--job-id {problem}", EXIT_BAD_INPUT)
    if args.db is not None and args.job_id is None:
        raise UserError("--db needs --job-id (the job whose history to use)", EXIT_BAD_INPUT)
    llm_config = llm_options.config_from_args(args)
    if llm_config is None and not args.llm:  # a half LLM configuration is an error here too
        llm_options.config_from_args(argparse.Namespace(**{**vars(args), "llm": None}))
    budget = budget_from_args(args)
    log = read_log(
        args.log,
        budget=budget,
        hash_log=args.db is not None,
        allow_binary=args.allow_binary,
        spool=llm_config is not None,  # the LLM reads context lines from the text
    )
    for warning in log.warnings:
        print(f"relaunch analyze: warning: {safe_line(warning)}", file=sys.stderr)

    try:
        if args.job_id is None:  # no SQLAlchemy import at all: `relaunch analyze LOG` starts fast
            return _analyze(args, llm_config, log)
        from relaunch.storage import StorageError

        try:
            return _analyze(args, llm_config, log)
        except StorageError as exc:
            raise UserError(str(exc), EXIT_DB) from None
    finally:
        log.discard()


def _history(args: argparse.Namespace) -> tuple[str | None, str, str]:
    """(url or None, source, one line for people) of the history this analysis uses.

    With `--job-id`: `--db` > `$RELAUNCH_DB` > the default history (storage.location), the
    one `relaunch run` writes; without `--db` it is only read. Without `--job-id` (or
    without a database at the default path) there is no history, and that is said.
    """
    from relaunch.storage.location import describe, history_url

    if args.job_id is None:
        return None, "none", "history: none (no --job-id: decided without earlier cycles)"
    url, source = history_url(args.db)
    if args.db is None and url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :]).expanduser()
        if not path.is_file():  # reading must not create an empty history
            return None, "none", f"history: none (no history database at {path.resolve()})"
    return url, source, describe(url, source)


def _analyze(args: argparse.Namespace, llm_config: Any, log: ReadLog) -> int:
    from relaunch.attribution.core.engine import AttributionEngine

    url, source, line = _history(args)
    save = args.db is not None  # without --db the history is read, never written
    log_path = args.log if args.log == "-" else os.path.abspath(args.log)
    repo = None
    cycle = args.cycle
    note = ""
    if url is not None:
        from relaunch.storage import open_repository
        from relaunch.storage.service_queries import find_cycle_by_log_path

        repo = open_repository(url)  # an unusable database is one error line, before ours
        if cycle is None:
            known = find_cycle_by_log_path(repo, log_path) if log_path != "-" else None
            if known is not None and known[0] == args.job_id:
                cycle = known[1]  # the cycle that wrote this log: no new cycle invented
            elif save:
                cycle = repo.allocate_cycle(args.job_id, first=FIRST_CYCLE)
            else:
                cycle = repo.next_cycle(args.job_id, first=FIRST_CYCLE)
        if not save:
            note = "not saved: pass --db URL to record this verdict"
    if url is not None:  # without a history the output itself says so (`stored:`)
        print(f"relaunch analyze: {safe_line(line)}", file=sys.stderr, flush=True)
    engine = AttributionEngine(repo)
    verdict = engine.analyze_cycle(
        args.job_id if repo else None,
        cycle,
        log_path,
        evidence=log.evidence,
        log_identity=log.identity,
        persist=repo is not None and save,
    ).to_dict()  # what this command prints (and the LLM enrichment reads) is the JSON form
    if llm_config is not None:
        verdict = _enrich(
            verdict, log.text_path, args, llm_config, engine, repo if save else None, cycle
        )
    out = dict(verdict)
    out["history_db"] = {
        "used": url is not None,
        "source": source,
        "saved": repo is not None and save,
        "says": line + (f"; {note}" if note else ""),
    }
    if repo is not None:
        out["job_id"] = args.job_id
        out["cycle"] = cycle
        rec = repo.get_cycle(args.job_id, cycle) if save else None
        if rec is not None:
            out["log"] = rec.log_identity
        repo.close()
    engine.close()
    if args.format == "json":
        sys.stdout.write(json_for_terminal(json.dumps(out, ensure_ascii=False)) + "\n")
    else:
        sys.stdout.write(safe_text(format_text(out)))
    return 0


def _enrich(
    verdict: dict[str, Any],
    text_path: str | None,
    args: argparse.Namespace,
    config: Any,
    engine: Any,
    repo: Any,
    cycle: Any,
) -> dict[str, Any]:
    """Optional LLM enrichment (`--llm` flags): never turns a verdict into an error."""
    try:
        from relaunch.restart_agent import llm

        if text_path is None:
            raise RuntimeError("the log's text is not in a file")
        enriched = llm.enrich_and_apply(verdict, text_path, config, engine.policy)
    except Exception as exc:  # noqa: BLE001 - an LLM failure never costs the deterministic verdict
        msg = safe_line(str(exc))
        print(f"relaunch analyze: warning: LLM enrichment failed: {msg}", file=sys.stderr)
        return verdict
    from relaunch.restart_agent.model import Verdict

    after, before = Verdict.read(enriched), Verdict.read(verdict)  # the JSON, read once
    if repo is not None and after is not None:
        repo.save_llm(args.job_id, cycle, after.llm.to_dict())
        if before is None or after.decision != before.decision:
            repo.save_verdict(args.job_id, cycle, enriched)
    return enriched


# in JSON text (ensure_ascii=False), the characters that are still unsafe on a terminal
# or in a line-oriented reader: C1 controls, bidi controls, line/paragraph separators
_JSON_UNSAFE = {
    cp: f"\\u{cp:04x}"
    for cp in (*range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x2028, 0x202F),
               *range(0x2066, 0x206A))
}  # fmt: skip


def json_for_terminal(text: str) -> str:
    """JSON text with those characters (and lone surrogates) as `\\uXXXX` escapes: the
    same JSON value, nothing a terminal acts on (issue 26, item 11)."""
    out = text.translate(_JSON_UNSAFE).encode("utf-8", "backslashreplace").decode("utf-8")
    return out


def _ranks(ranks: list[int], limit: int = 8) -> str:
    if not ranks:
        return "-"
    spans: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    text = ",".join(spans[:limit])
    return text + (",…" if len(spans) > limit else "")


def _kv(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items() if not isinstance(v, (dict, list)))


def format_text(v: dict[str, Any]) -> str:
    """The verdict for people: decision first, then why, then the evidence with line numbers."""
    lines: list[str] = []
    where = ""
    if v.get("job_id") is not None:
        where = f"  (job {v['job_id']}, cycle {v.get('cycle')})"
    from relaunch.restart_agent.model import Verdict

    t = Verdict.read(v)  # the verdict's JSON (plus the keys above and below), read once
    if t is None:
        return f"no verdict{where}\n"
    lines.append(f"{t.decision}{where}")
    lines.append(f"why:       {t.basis}")
    lines.append(f"rule:      {t.rule}")
    p = t.primary
    if p:
        rank = f", rank {p.rank}" if p.rank is not None else ""
        lines.append(f"primary:   {p.failure_class} ({p.domain}) at line {p.line}{rank}")
        lines.append(f"           {p.text}")
        lines.append(f"fingerprint: {p.fingerprint}")
        if p.entity:
            lines.append(f"entity:    {p.entity}")
    else:
        lines.append("primary:   none found")
    hist = t.history.to_dict()
    if hist:
        lines.append(f"history:   {_kv(hist)}")
    budgets = t.budgets.to_dict()
    if budgets:
        lines.append(f"budgets:   {_kv(budgets)}")
    prog = t.progress
    if prog.known:
        parts = [f"last iteration {prog.last_iteration}"]
        if prog.line is not None:
            parts.append(f"line {prog.line}")
        if prog.dialect:
            parts.append(f"dialect {prog.dialect}")
        if prog.last_checkpoint:
            parts.append(f"last checkpoint {prog.last_checkpoint}")
        lines.append("progress:  " + ", ".join(parts))
    else:
        lines.append("progress:  unknown (no progress lines matched)")
    fan = t.fan_out.to_dict()
    if fan:
        lines.append(f"fan-out:   {_kv(fan)}")
    if t.cascades:
        lines.append("cascades:")
        for c in t.cascades:
            ranks = list(c.ranks or [])
            where = f"on ranks {_ranks(ranks)}" if ranks else "on no named rank"
            lines.append(
                f"  {c.failure_class} ({c.role}) x{c.count} {where}, first at line {c.first_line}"
            )
    if t.evidence:
        lines.append("evidence:")
        for e in t.evidence:
            rank = f" [rank {e.rank}]" if e.rank is not None else ""
            lines.append(f"  {e.line:>8}{rank} {e.failure_class}: {e.text}")
    store = v.get("history_db") or {}
    if store.get("says"):
        lines.append(f"stored:    {store['says']}")
    if t.llm.status is not None:  # an LLM ran (--llm): its own summary
        from relaunch.restart_agent.llm import format_text as llm_text

        lines.extend(llm_text(v).splitlines())
    else:
        lines.append("llm:       not used")
    log_id = v.get("log")
    scan = t.scan.to_dict()
    if log_id or scan:
        size = (log_id or {}).get("size", t.scan.bytes if "bytes" in scan else None)
        lines.append(
            f"log:       {(log_id.get('path') or '<stdin>') if log_id else ''} {size} bytes, "
            f"{t.scan.lines if 'lines' in scan else '?'} lines"
        )
    return "\n".join(lines) + "\n"
