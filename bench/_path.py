"""Put the repository root on sys.path, so ``python bench/<x>.py`` imports the product and tests/support, and
keep temporary files where the node runner trusts them (tests/support/temproot.py: not under /tmp)."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.support.temproot import use_private_tmp  # noqa: E402

use_private_tmp()
