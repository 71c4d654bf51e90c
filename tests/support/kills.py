"""A kill -9 at each write of the code under test, in turn: the write goes through, then the process is gone
(nothing catches :class:`Killed`, nothing cleans up), as tests/rollout/test_interrupted.py's Killer does for
the function's calls. Used by the node's kill matrices (tests/node/test_bootunit.py, test_client_kills.py)."""

import os


class Killed(BaseException):
    """A kill -9 as the code sees it: nothing catches it, nothing cleans up."""


class KillAfter(object):
    """Counts writes (:meth:`count`) and raises Killed right after the ``k``-th; ``calls`` names them all."""

    def __init__(self, k):
        self.k, self.calls = k, []

    def count(self, what):
        self.calls.append(what)
        if len(self.calls) == self.k:
            raise Killed(what)

    def module(self, real, name, verb):
        """``real`` (a module) whose function ``name`` counts each call after it ran, as ``verb <file name>``
        of its last argument (the path it wrote)."""
        killer = self

        class _Counted(object):
            def __getattr__(_, attr):
                return getattr(real, attr)

        def counted(*args):
            out = getattr(real, name)(*args)
            killer.count("%s %s" % (verb, os.path.basename(args[-1])))
            return out

        proxy = _Counted()
        setattr(proxy, name, counted)
        return proxy
