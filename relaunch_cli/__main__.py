"""Allow `python -m relaunch.cli`."""

import sys

from relaunch.cli.main import main

sys.exit(main())
