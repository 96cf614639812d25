"""relaunch: one namespace for the launcher, the restart agent, the attribution service,
storage and the dashboard.

The repository keeps one folder per package at its root (`launcher/`, `restart_agent/`,
`attribution/`, `storage/`, `web/`, `relaunch_cli/`); this package names them
`relaunch.launcher`, `relaunch.restart_agent`, `relaunch.attribution`, `relaunch.storage`,
`relaunch.web` and `relaunch.cli` (its entries are links to those folders), so nothing of
relaunch is a top-level `launcher`, `storage` or `web` in a user's environment. The worker
API is `relaunch.client`.
"""

__version__ = "0.1.0"
