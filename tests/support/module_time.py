"""A stand-in for what one module reads as ``time``: the real module's names, with a test's own ``sleep`` or
``monotonic`` in place.

``monkeypatch.setattr(module.time, "sleep", fake)`` sets the attribute on the one ``time`` module of the whole
process, so every thread's sleeps and clock reads go to the fake while the test runs: the test servers' own
threads, the deadline watchdog (functions/base/deadline.py), threads an earlier test of the same pytest worker
left running. Their sleeps were counted as the module's (or spun, a fake sleep not sleeping), and a fake
clock's ticks were taken by them. ``monkeypatch.setattr(module, "time", module_time(sleep=fake))`` changes
what that module reads, and nothing else."""

import time
import types
from typing import Any


def module_time(**overrides: Any) -> types.SimpleNamespace:
    names = {name: getattr(time, name) for name in dir(time) if not name.startswith("__")}
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise AttributeError("time has no %s" % ", ".join(unknown))
    names.update(overrides)
    return types.SimpleNamespace(**names)
