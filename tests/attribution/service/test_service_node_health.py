"""Node-health reports posted to the real service: stored with the cycle, and the cycle's
verdict decided again so that it records the node."""

from __future__ import annotations

import pytest

from tests._service_helpers import require_restart_agent

require_restart_agent()

pytestmark = pytest.mark.slow

CUDA = "[rank3]: RuntimeError: CUDA error: unspecified launch failure\n"
SICK = {
    "node": "node1",
    "host": "gpu-17",
    "healthy": False,
    "reason": "external_service: ib check failed",
    "ran_this_cycle": True,
    "excluded_from_cycle": 1,
    "checks": [{"name": "external_service", "status": "fail", "detail": "ib", "data": {}}],
    "duration_s": 0.01,
}


def _terminal(c, log, job: str, cycle: int) -> dict:
    body = {"log_path": str(log), "job_id": job, "cycle_id": cycle, "analysis_intent": "terminal"}
    assert c.post("/logs", json=body).status_code < 300
    return c.get("/logs", params={"log_path": str(log), "wait": "true"}).json()


def test_node_health_joins_the_cycle_verdict(service_factory):
    svc = service_factory()
    log = svc.root / "nh" / "cycle_0.log"
    log.parent.mkdir()
    log.write_text("[rank0]: step 5 | loss 2\n" + CUDA)
    with svc.client() as c:
        before = _terminal(c, log, "nhjob", 0)["result"]
        assert before["node_health"] == []
        r = c.post("/v1/jobs/nhjob/cycles/0/node-health", json=SICK)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["node"] == "node1"
        assert [n["node"] for n in out["verdict"]["node_health"]] == ["node1"]
        assert (
            "Node node1 failed its health check and is left out of cycle 1"
            in (out["verdict"]["basis"])
        )
        cyc = c.get("/v1/jobs/nhjob/cycles/0").json()
        assert cyc["node_health"]["node1"]["reason"] == SICK["reason"]
        assert cyc["verdict"]["node_health"][0]["failed_checks"] == ["external_service"]
        now = c.get("/logs", params={"log_path": str(log)}).json()["result"]
        assert now["node_health"][0]["node"] == "node1"  # the NVRx poll sees it too


def test_node_health_before_the_log_is_stored_for_the_first_analysis(service_factory):
    svc = service_factory()
    log = svc.root / "early" / "cycle_0.log"
    log.parent.mkdir()
    log.write_text(CUDA)
    with svc.client() as c:
        r = c.post("/v1/jobs/early/cycles/0/node-health", json=SICK)
        assert r.status_code == 200, r.text
        assert r.json()["verdict"] is None  # no log known for the cycle yet
        result = _terminal(c, log, "early", 0)["result"]
        assert [n["node"] for n in result["node_health"]] == ["node1"]


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ({"healthy": False}, "node", 422),
        ({"node": "", "healthy": False}, "node", 400),
        ({"node": "n1"}, "healthy", 422),
        ({"node": "n1", "healthy": "no"}, "healthy", 400),
        ({"node": "n1", "healthy": False, "excluded_from_cycle": -1}, "excluded_from_cycle", 400),
        ({"node": "n1", "healthy": False, "checks": "all"}, "checks", 400),
    ],
)
def test_bad_node_health_reports_get_a_clear_error_and_lose_nothing(
    service_factory,
    body: dict,
    field: str,
    status: int,
):
    svc = service_factory()
    with svc.client() as c:
        assert c.post("/v1/jobs/j/cycles/0/node-health", json=SICK).status_code == 200
        r = c.post("/v1/jobs/j/cycles/0/node-health", json=body)
        assert r.status_code == status, r.text
        assert field in r.text
        assert c.post("/v1/jobs/j/cycles/-1/node-health", json=SICK).status_code == 400
        nan = c.post(  # JSON cannot hold NaN: a free-form field keeps null, never a 500
            "/v1/jobs/j/cycles/1/node-health",
            content=b'{"node": "n1", "healthy": false, "gpu_temp": NaN}',
            headers={"content-type": "application/json"},
        )
        assert nan.status_code == 200, nan.text
        assert c.get("/v1/jobs/j/cycles/1").json()["node_health"]["n1"]["gpu_temp"] is None
        cyc = c.get("/v1/jobs/j/cycles/0").json()
        assert cyc["node_health"] == {"node1": SICK}
