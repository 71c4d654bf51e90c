"""``python3 -m node_bootstrap ...``: see :mod:`node_bootstrap.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
