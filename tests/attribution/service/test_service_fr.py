"""Flight Recorder dumps posted to the real service: stored with the cycle, analysed, and
used as evidence for that cycle's verdict."""

from __future__ import annotations

import pytest

from tests._fr_helpers import stalled_allreduce_job, write_dumps
from tests._service_helpers import require_restart_agent

require_restart_agent()

pytestmark = pytest.mark.slow

TIMEOUTS = [
    "[rank0]: iteration 40 | lm loss 2.2",
    "[rank0]: [E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds",
    "[rank1]: [E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds",
    "[rank3]: [E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds",
]


def test_fr_dumps_join_the_cycle_verdict(service_factory, tmp_path):
    svc = service_factory()
    log = svc.root / "fr" / "cycle_0.log"
    log.parent.mkdir()
    log.write_text("\n".join(TIMEOUTS) + "\n")
    dumps = write_dumps(stalled_allreduce_job(4, culprits=[2]), tmp_path / "dumps")
    with svc.client() as c:
        c.post(
            "/logs",
            json={
                "log_path": str(log),
                "job_id": "frjob",
                "cycle_id": 0,
                "analysis_intent": "terminal",
            },
        )
        before = c.get("/logs", params={"log_path": str(log)}).json()["result"]
        assert before["fr"] is None
        files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in dumps]
        r = c.post("/v1/jobs/frjob/cycles/0/fr", files=files)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["findings"]["culprit_ranks"] == [2]
        assert sorted(out["files"]) == sorted(p.name for p in dumps)
        assert out["verdict"]["fr"] == {"culprit_ranks": [2]}
        cyc = c.get("/v1/jobs/frjob/cycles/0").json()
        assert cyc["fr_findings"]["culprit_ranks"] == [2]
        assert cyc["verdict"]["fr"] == {"culprit_ranks": [2]}
        assert c.get("/v1/jobs/frjob/cycles/0/evidence").json()["fr"]["culprit_ranks"] == [2]
        now = c.get("/logs", params={"log_path": str(log)}).json()["result"]
        assert now["fr"] == {"culprit_ranks": [2]}
        # garbage instead of dumps: a 400 JSON error, and the stored findings are kept
        bad = c.post(
            "/v1/jobs/frjob/cycles/0/fr",
            files=[("files", ("_dump_0", b"not a pickle", "application/octet-stream"))],
        )
        assert bad.status_code == 400 and bad.json()["error_code"] == "invalid_parameter"
        assert c.post("/v1/jobs/frjob/cycles/0/fr").status_code == 422  # no files at all
        assert c.get("/v1/jobs/frjob/cycles/0").json()["fr_findings"]["culprit_ranks"] == [2]
    uploads = list((svc.workdir / "data" / "fr" / "frjob" / "cycle_0").iterdir())
    assert len(uploads) == 1  # the rejected upload left nothing behind
    assert sorted(p.name for p in uploads[0].iterdir()) == sorted(p.name for p in dumps)
