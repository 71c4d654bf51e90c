"""``python3 -m node_bootstrap ...``: see :mod:`node_bootstrap.commands.cli`."""

import sys

from .commands.cli import main

if __name__ == "__main__":
    sys.exit(main())
