"""Allow `python -m relaunch` (the same as the `relaunch` console script)."""

import sys

from relaunch.cli.main import main

sys.exit(main())
