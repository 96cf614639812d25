"""Client of an external node-health service (gRPC, usually over a Unix socket).

`--ft-node-health-check-endpoint unix:///run/nvhcd.sock` points the launcher at a service
implementing `nvhcd.HealthCheckService/RunHealthCheck` (node_health.proto, wire-compatible
with NVRx's nvhcd). The node is unhealthy only on an explicit failure (`success=false`) or
`fail_count > 0` (the proto field, or a numeric "fail_count" in the JSON output). An
unreachable or slow service, or output that cannot be used, fails open: the check is
`error`, logged, and never takes the node out of the job.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import grpc

from relaunch.launcher.health import node_health_pb2, node_health_pb2_grpc
from relaunch.launcher.health.report import CheckResult

log = logging.getLogger(__name__)

CHECK_NAME = "external_service"
DEFAULT_TIMEOUT_S = 10.0
MAX_OUTPUT_CHARS = 4096


def normalize_endpoint(endpoint: str) -> str:
    """Validate an endpoint and return the gRPC target.

    Accepts `unix:///abs/path`, `unix:/abs/path`, `unix:relative` (gRPC's forms) and
    `host:port` / `dns:///host:port` for a TCP service. Raises ValueError on anything else.
    """
    ep = endpoint.strip()
    if not ep:
        raise ValueError("node health endpoint is empty; expected unix:///path/to/socket")
    if ep.startswith("unix://"):
        path = ep[len("unix://") :]
        if not path.startswith("/"):
            raise ValueError(
                f"node health endpoint {endpoint!r}: unix:// needs an absolute path "
                "(unix:///path/to/socket)"
            )
        return ep
    if ep.startswith("unix:"):
        if len(ep) == len("unix:"):
            raise ValueError(f"node health endpoint {endpoint!r} has no socket path")
        return ep
    if ep.startswith(("dns:", "ipv4:", "ipv6:")):
        return ep
    if "://" in ep:
        raise ValueError(
            f"node health endpoint {endpoint!r}: unsupported scheme; "
            "use unix:///path/to/socket or host:port"
        )
    host, sep, port = ep.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(
            f"node health endpoint {endpoint!r}: expected unix:///path/to/socket or host:port"
        )
    return ep


def _fail_count_from_output(parsed: Any) -> int | None:
    if isinstance(parsed, dict):
        value = parsed.get("fail_count")
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    return None


def interpret_response(
    success: bool, fail_count: int, output: str, error: str = "", exit_code: int = 0
) -> CheckResult:
    """Turn a RunHealthCheck answer into a check. Pure.

    Unhealthy on success=False or fail_count > 0 (from the field or the JSON output);
    output that is not a JSON object is kept as text and otherwise ignored (fails open).
    """
    data: dict[str, Any] = {
        "success": bool(success),
        "fail_count": int(fail_count),
        "exit_code": int(exit_code),
    }
    if error:
        data["error"] = error[:MAX_OUTPUT_CHARS]
    parsed: Any = None
    output_note = ""
    if output.strip():
        try:
            parsed = json.loads(output)
        except ValueError:
            output_note = "output is not JSON; ignored"
            data["output_text"] = output[:MAX_OUTPUT_CHARS]
        else:
            if isinstance(parsed, dict):
                data["output"] = parsed
            else:
                output_note = "output JSON is not an object; ignored"
                data["output_text"] = output[:MAX_OUTPUT_CHARS]
    if output_note:
        data["output_note"] = output_note
        log.warning("node health service: %s", output_note)
    out_count = _fail_count_from_output(parsed)
    effective = max(int(fail_count), out_count or 0)
    data["effective_fail_count"] = effective
    if not success:
        reason = parsed.get("reason") if isinstance(parsed, dict) else None
        why = error or (str(reason) if reason else "") or "no reason given"
        return CheckResult(CHECK_NAME, "fail", f"health service reported failure: {why}", data)
    if effective > 0:
        return CheckResult(
            CHECK_NAME, "fail", f"health service reported {effective} failed check(s)", data
        )
    return CheckResult(CHECK_NAME, "ok", output_note, data)


class ExternalHealthClient:
    """Calls RunHealthCheck on the configured endpoint; never raises from `check()`."""

    def __init__(self, endpoint: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.endpoint = endpoint
        self.target = normalize_endpoint(endpoint)
        if timeout_s <= 0:
            raise ValueError("node health timeout must be > 0 seconds")
        self.timeout_s = timeout_s

    def check(self, args: Sequence[str] = ()) -> CheckResult:
        request = node_health_pb2.HealthCheckRequest(args=list(args))
        base = {"endpoint": self.endpoint}
        try:
            with grpc.insecure_channel(self.target) as channel:
                stub = node_health_pb2_grpc.HealthCheckServiceStub(channel)
                reply = stub.RunHealthCheck(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            code_name = code.name if code is not None else "UNKNOWN"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                msg = f"health service did not answer within {self.timeout_s:g}s; failing open"
            elif code == grpc.StatusCode.UNAVAILABLE:
                msg = f"health service unreachable at {self.endpoint}; failing open"
            else:
                msg = f"health service call failed ({code_name}: {details}); failing open"
            log.warning("%s", msg)
            return CheckResult(
                CHECK_NAME, "error", msg, {**base, "grpc_code": code_name, "details": details}
            )
        except Exception as exc:  # noqa: BLE001 - any client-side problem fails open
            msg = f"health service call failed ({type(exc).__name__}: {exc}); failing open"
            log.warning("%s", msg)
            return CheckResult(CHECK_NAME, "error", msg, base)
        result = interpret_response(
            reply.success, reply.fail_count, reply.output, reply.error, reply.exit_code
        )
        return CheckResult(result.name, result.status, result.detail, {**base, **result.data})


def external_check(
    endpoint: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, args: Sequence[str] = ()
) -> CheckResult:
    """One call to the external service (see `ExternalHealthClient`)."""
    return ExternalHealthClient(endpoint, timeout_s=timeout_s).check(args)
