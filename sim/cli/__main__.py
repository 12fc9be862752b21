"""``python -m sim.cli``: the ``pagesim`` command."""

import sys

from sim.cli import main

sys.exit(main())
