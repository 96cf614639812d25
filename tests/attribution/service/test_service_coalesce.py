"""Two identical analysis requests never both start an analysis of the same unchanged log.

Forces the interleaving a loaded machine produced once in
test_identical_concurrent_requests_are_coalesced: request B misses the stored verdict
while nothing is in flight, request A's analysis starts and finishes, then B goes on. B
must end up sharing A's analysis or its stored verdict, never starting a second one.
Real `ServiceState`, real SQLite file, real log; only the moment B is descheduled is
chosen by the test.
"""

from __future__ import annotations

import threading
from pathlib import Path

from relaunch.attribution.service.settings import ServiceSettings
from relaunch.attribution.service.state import ServiceState


def make_state(tmp_path: Path) -> tuple[ServiceState, Path]:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "cycle_0.log"
    log.write_text("".join(f"[rank{i % 8}]: iteration {i} | lm loss 2.0\n" for i in range(2000)))
    settings = ServiceSettings(
        db_url=f"sqlite:///{tmp_path / 'relaunch.db'}",
        allowed_roots=[logs],
        data_dir=tmp_path / "data",
        resume_unfinished=False,
    )
    return ServiceState(settings), log


def test_request_descheduled_after_a_cache_miss_does_not_start_a_second_analysis(
    tmp_path: Path,
) -> None:
    st, log = make_state(tmp_path)
    try:
        st.submit_log(str(log), user=None, job_id="co", cycle=0, intent="track_only")
        tl = st.tracked_key("co", 0)
        assert tl is not None
        cache_missed, a_finished = threading.Event(), threading.Event()
        original = st._cached_verdict

        def cached_verdict(t):  # type: ignore[no-untyped-def]
            found = original(t)
            if threading.current_thread().name == "B":
                cache_missed.set()
                # B is "descheduled" until A's analysis ended. With the fix A cannot start
                # while B decides (it waits on the key's lock), so this wait runs out;
                # either way the outcome asserted below does not depend on it.
                a_finished.wait(2.0)
            return found

        st._cached_verdict = cached_verdict  # type: ignore[method-assign]
        futures: dict[str, object] = {}

        def b() -> None:
            futures["B"] = st.analyze(tl).result(timeout=120)

        def a() -> None:
            cache_missed.wait(120)
            futures["A"] = st.analyze(tl).result(timeout=120)
            a_finished.set()

        threads = [threading.Thread(target=b, name="B"), threading.Thread(target=a, name="A")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert futures["A"] == futures["B"]
        assert st.coalescer.started == 1
        assert st.coalescer.joined + st.cache_hits == 1
    finally:
        st.executor.shutdown(wait=True)
        st.engine.close(timeout=10.0)


def test_a_later_identical_request_reuses_the_finished_verdict(tmp_path: Path) -> None:
    st, log = make_state(tmp_path)
    try:
        for _ in range(2):
            st.submit_log(str(log), user=None, job_id="co", cycle=0, intent="terminal")
            tl = st.tracked_key("co", 0)
            assert tl is not None and tl.future is not None
            tl.future.result(timeout=120)
        assert st.coalescer.started == 1
        assert st.cache_hits == 1
    finally:
        st.executor.shutdown(wait=True)
        st.engine.close(timeout=10.0)
