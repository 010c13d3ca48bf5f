"""``python -m inferplan`` runs the command line."""

import sys

from inferplan.cli import main

sys.exit(main())
