"""The planner package is pure: computation from the standard library, the MIG core, HiGHS and itself, nothing
that does I/O (the same rule tests/test_layout.py applies to the rest of the pure core)."""

from tests.test_layout import COMPUTE_STDLIB, MODULES, _imports, _within

PACKAGE = "functions.decision.layout"


def test_the_planner_package_imports_no_io():
    modules = sorted(m for m in MODULES if _within(m, PACKAGE))
    assert {PACKAGE + ".planner", PACKAGE + ".bounds", PACKAGE + ".vocabulary"} <= set(modules)
    # highspy: HiGHS, an integer-program solver (exact.py), computation only, imported when a small pool is
    # planned (never on the function's cold path)
    wrong = sorted("%s imports %s" % (m, i) for m in modules for i in _imports(m)
                   if not (_within(i, PACKAGE) or _within(i, "node_bootstrap.mig")
                           or i.split(".")[0] in COMPUTE_STDLIB or i == "highspy"))
    assert wrong == []
    assert "node_bootstrap.mig.solver" in _imports(PACKAGE + ".planner")  # the rule sees real imports
