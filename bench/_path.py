"""Put the repository root on sys.path, so ``python bench/<x>.py`` imports the product and tests/support."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
