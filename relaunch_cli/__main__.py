"""Allow `python -m relaunch_cli`."""

import sys

from relaunch_cli.main import main

sys.exit(main())
