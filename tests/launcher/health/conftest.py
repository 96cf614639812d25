"""Tests of Node health (launcher/health/): run-time checks (fake sysfs trees), counter growth, NVML,
the external gRPC health service, preflight, the shared exclusion file, hostile inputs that
must fail open (test_health_bad_inputs_fail_open.py), and a run-time failure recorded as the
node's, not the workload's (test_health_failure_is_the_nodes.py). Helpers in
tests/_health_helpers.py.

Fixtures: none of its own (the root conftest's are there if needed).
"""
