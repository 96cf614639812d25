"""Tests of the Flight Recorder reader and analyzer (attribution/fr/): real dumps, versions, broken and
malicious files, stalls and culprits, and dumps from a real 4-process gloo job
(tests/_fr_helpers.py).

Fixtures: none of its own (the root conftest's are there if needed).
"""
