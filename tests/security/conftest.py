"""Tests of Hostile inputs and trust boundaries across packages: seeded fuzzing of the CLI and the
upload routes, hostile Flight Recorder dump sets, secret files that are not regular files,
one hostile-path suite against every file-safety entry point, forged launcher facts, races
against the file-safety path, the service's trust boundaries.

Fixtures: none of its own; it uses the root conftest's `db_url`, `service_factory`.
"""
