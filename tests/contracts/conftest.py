"""Tests of the layout rules of the code itself: the import contracts of docs/ARCHITECTURE.md's
package table, unique module file names, every module the architecture page names exists,
the one `relaunch.*` namespace, and `relaunch analyze` without `--db` never importing SQLAlchemy.
Files are read or fresh interpreters started; no service, no launcher.

Fixtures: none of its own (the root conftest's are there if needed).
"""
