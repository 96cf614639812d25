"""Tests of the history store (storage/): schema, migrations, upserts, concurrency and first open on a
real SQLite file (and PostgreSQL when RELAUNCH_TEST_PG_URL is set), leases, the job-id rule,
straggler scores.

Fixtures: none of its own; it uses the root conftest's `db_url`, `repo`, `service_factory`.
"""
