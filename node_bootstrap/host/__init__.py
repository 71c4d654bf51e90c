"""The node's host, outside the GPU: its processes (``processkill``, ``holders``, with ``bounded`` for a look under a deadline), the GPU's clients
(``clients``), the boot unit (``bootunit``) and the units that keep the holders report fresh (``holdersunit``),
with what every unit shares (``unitfile``), the node lock (``lock``), the reboot record (``rebootguard``),
files (``jsonfile``) and host commands (``runner``).

Imports only the pure MIG core, the node's error classes and the request document: never the driver,
Kubernetes or the commands (tests/test_layout.py).
"""
