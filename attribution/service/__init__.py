"""The attribution service behind `relaunch serve`.

A FastAPI application (`attribution.service.app.create_app(settings)`) over the
attribution engine and the history repository: the NVRx-compatible `/healthz` and
`/logs` endpoints, the versioned `/v1/...` API, incremental analysis of growing logs,
request coalescing, limits, bearer-token auth and one JSON error model.
"""
