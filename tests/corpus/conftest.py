"""Tests of Real failure excerpts from public issue threads (tests/fixtures/real*/) through
`relaunch analyze`, each cycle's decision against its label (tests/_real_corpus_driver.py).

Fixtures: none of its own (the root conftest's are there if needed).
"""
