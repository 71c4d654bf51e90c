"""The node commands: the command line (``cli``), ``apply`` and ``disable``, the other commands and the
helpers they share (``common``), what they plan and how they carry it out (``planner``, ``reconcile``),
the backend they run on, real or simulated (``backend``, ``simhost``), and the text a person reads
(``textout``). The only part that may import every other; nothing outside it imports it but
``python -m node_bootstrap`` (tests/test_layout.py).
"""
