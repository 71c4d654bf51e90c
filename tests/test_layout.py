"""The code's layout, read with ``ast``: imports go one way (commands -> handler -> pipeline -> the rest ->
node_bootstrap), the pure core imports nothing that does I/O, and no two modules share a file name.

An import is every ``import``/``from ... import`` anywhere in a module (also inside functions: the lazy
imports count), resolved to an absolute module name, plus every string constant that names one of the
project's modules (``importlib.import_module("functions.delivery.node_executor")`` is an import too).
"""

import ast
import os
from collections import Counter
from typing import Dict, Set

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Computation only: no files, sockets, processes, clocks or environment behind any of these.
COMPUTE_STDLIB = {"collections", "dataclasses", "enum", "functools", "heapq", "itertools", "json", "math", "re", "typing"}
# The pure core: catalogue, label parsing, solver, the rollout's wave planning, the mig-parted converter,
# the per-instance decision, the instance-family table, the autoscaler tag diff, and the typed vocabulary
# they share.
PURE_PACKAGES = ("node_bootstrap.mig", "node_bootstrap.outside")
PURE_MODULES = {"functions.decision.waves", "functions.decision.migparted", "functions.decision.decide", "functions.decision.families",
                "functions.base.model", "functions.base.event_result", "functions.base.errors", "functions.decision.autoscaler_tags",
                # the pod's ask and a Node's allocatable read by one quantity reader (waves.allocatable_count)
                "functions.decision.layout.matching", "functions.decision.layout.vocabulary"}
PURE_THIRD_PARTY = {"pydantic"}  # the vocabulary's types (functions.base.model): validation, no I/O

# The function's parts (docs/development.md), highest first: a part imports its own modules and those of
# parts of a lower rank, never one of its own rank or above, except the pairs in SIDEWAYS. The command line
# sits on the FC entry point, which sits on the pipeline.
FUNCTION_PARTS = {
    "functions.commands": 6, "functions.handler": 5, "functions.pipeline": 4,
    "functions.rollout": 3, "functions.delivery": 3,
    "functions.kube": 2, "functions.cloud": 2, "functions.decision": 1,
    "functions.base": 0,
}
# Same-rank imports that are allowed, and why: Kubernetes access asks ACK's API for the cluster credential
# (the startup taint removal builds its client with functions.cloud.cs_lookup).
SIDEWAYS = {("functions.kube", "functions.cloud")}
TOP_LEVEL = {"__init__.py", "handler.py"}  # beside the parts' folders
MAX_PARTS = 8
RANKS = tuple(FUNCTION_PARTS.items())


def _modules() -> Dict[str, str]:
    out = {}
    for top in ("functions", "node_bootstrap"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    out[module[:-len(".__init__")] if module.endswith(".__init__") else module] = path
    return out


MODULES = _modules()


def _imports(module: str) -> Set[str]:
    path = MODULES[module]
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = base + "." + node.module if node.module else base
            found.add(base)
            # ``from functions.decision import waves`` imports the module functions.decision.waves
            found.update(base + "." + a.name for a in node.names if base + "." + a.name in MODULES)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES:
            found.add(node.value)
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _rank(name: str) -> int:
    return next((rank for package, rank in RANKS if _within(name, package)), 0)


def _part(name: str) -> str:
    return next((part for part in FUNCTION_PARTS if _within(name, part)), "")


def test_imports_only_go_down():
    def wrong_way(m, i):
        mine, theirs = _part(m), _part(i)
        if not theirs or not mine or mine == theirs:
            return False  # the package itself, or within one part
        return FUNCTION_PARTS[theirs] >= FUNCTION_PARTS[mine] and (mine, theirs) not in SIDEWAYS

    wrong = sorted("%s imports %s" % (m, i) for m in MODULES if _within(m, "functions") for i in _imports(m)
                   if wrong_way(m, i))
    assert wrong == []


def test_every_function_module_belongs_to_a_part():
    """No module sits beside the parts but the FC entry point: a reader sees the parts from the tree."""
    loose = sorted(m for m in MODULES if _within(m, "functions") and m != "functions" and not _part(m))
    assert loose == []
    top = sorted(os.listdir(os.path.join(ROOT, "functions")))
    folders = [n for n in top if os.path.isdir(os.path.join(ROOT, "functions", n)) and n != "__pycache__"]
    files = [n for n in top if n.endswith(".py")]
    assert set(files) == TOP_LEVEL and len(folders) <= MAX_PARTS
    assert sorted("functions." + f for f in folders) == sorted(p for p in FUNCTION_PARTS if p != "functions.handler")


def test_nothing_outside_the_command_package_imports_it():
    wrong = ["%s imports %s" % (m, i) for m in MODULES if not _within(m, "functions.commands")
             for i in _imports(m) if _within(i, "functions.commands")]
    assert wrong == []


def test_node_bootstrap_never_imports_the_function():
    wrong = ["%s imports %s" % (m, i) for m in MODULES if _within(m, "node_bootstrap")
             for i in _imports(m) if _within(i, "functions")]
    assert wrong == []


# node_bootstrap's parts (docs/development.md): what each may import of node_bootstrap besides itself. The
# commands may import every part; nothing but the package's __main__ imports the commands.
NODE_SHARED = ("node_bootstrap.errors", "node_bootstrap.request")
# node_bootstrap.outside is the reader rule for data from outside the process: every part may read through it.
NODE_PARTS = {
    "node_bootstrap.outside": (),
    "node_bootstrap.mig": ("node_bootstrap.outside",),
    "node_bootstrap.errors": (),
    "node_bootstrap.request": ("node_bootstrap.mig", "node_bootstrap.errors", "node_bootstrap.outside",
                               "node_bootstrap.localfile"),
    "node_bootstrap.driver": ("node_bootstrap.mig", "node_bootstrap.errors", "node_bootstrap.outside"),
    "node_bootstrap.localfile": (),
    "node_bootstrap.hostlookup": (),
    "node_bootstrap.host": ("node_bootstrap.mig", "node_bootstrap.outside", "node_bootstrap.localfile") + NODE_SHARED,
    "node_bootstrap.kube": ("node_bootstrap.mig", "node_bootstrap.errors", "node_bootstrap.outside",
                            "node_bootstrap.localfile", "node_bootstrap.hostlookup"),
}


def _node_part(name: str) -> str:
    for part in list(NODE_PARTS) + ["node_bootstrap.commands"]:
        if _within(name, part):
            return part
    return "node_bootstrap"  # the package itself (__init__, __main__)


@pytest.mark.parametrize("part", sorted(NODE_PARTS))
def test_each_part_of_the_node_imports_only_what_it_may(part):
    allowed = NODE_PARTS[part] + (part,)
    wrong = sorted("%s imports %s" % (m, i) for m in MODULES if _within(m, part) for i in _imports(m)
                   if _within(i, "node_bootstrap") and i != "node_bootstrap" and not any(_within(i, a) for a in allowed))
    assert wrong == []


def test_only_the_package_entry_point_imports_the_node_commands():
    wrong = sorted("%s imports %s" % (m, i) for m in MODULES if m != "node_bootstrap.__main__"
                   and not _within(m, "node_bootstrap.commands") for i in _imports(m) if _within(i, "node_bootstrap.commands"))
    assert wrong == []


def test_every_node_module_belongs_to_a_part():
    """No module sits beside the parts: a reader sees the parts from the tree."""
    loose = sorted(m for m in MODULES if _within(m, "node_bootstrap") and _node_part(m) == "node_bootstrap"
                   and m not in ("node_bootstrap", "node_bootstrap.__main__"))
    assert loose == []


def _pure(name: str) -> bool:
    return name in PURE_MODULES or any(_within(name, p) for p in PURE_PACKAGES)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _pure(m)))
def test_the_pure_core_imports_no_io(module):
    allowed = COMPUTE_STDLIB | PURE_THIRD_PARTY
    wrong = sorted(i for i in _imports(module) if not _pure(i) and i.split(".")[0] not in allowed)
    assert wrong == [], "%s may import only the pure core and %s" % (module, sorted(allowed))


def test_no_two_function_modules_share_a_file_name():
    names = Counter(os.path.basename(p) for m, p in MODULES.items()
                    if _within(m, "functions") and not p.endswith("__init__.py"))
    assert sorted(n for n, count in names.items() if count > 1) == []


def test_the_rules_see_what_they_forbid():
    """The checks above find real imports: the command line imports the pipeline, the pipeline the
    delivery executor by name (a string), and the rollout's run its pure wave planning."""
    assert "functions.pipeline.event" in _imports("functions.commands.invoke")
    assert "functions.delivery.node_executor" in _imports("functions.pipeline.point_of_change")
    assert "functions.decision.waves" in _imports("functions.rollout.run")
    assert "subprocess" in _imports("functions.commands.stack.build") and not _pure("functions.commands.stack.build")
    assert _rank("functions.commands.main") > _rank("functions.handler") > _rank("functions.pipeline.event") > \
        _rank("functions.rollout.run") > _rank("functions.kube.nodes") > _rank("functions.decision.waves") > \
        _rank("functions.base.settings") == 0
    # a sideways pair is a real import, and the base imports nothing else of the function
    assert "functions.cloud.cs_lookup" in _imports("functions.kube.taint")
    assert [i for m in MODULES if _part(m) == "functions.base" for i in _imports(m)
            if _part(i) not in ("", "functions.base")] == []
    # and the node's: the commands use every part, the host's boot unit the request document
    assert {"node_bootstrap.driver.nvml", "node_bootstrap.host.clients", "node_bootstrap.kube.events"} <= \
        _imports("node_bootstrap.commands.apply")
    assert "node_bootstrap.request" in _imports("node_bootstrap.host.bootunit")
    assert "node_bootstrap.commands.cli" in _imports("node_bootstrap.__main__")


def _cycles():
    """Import circles among the function's modules (lazy imports count: they are still a dependency)."""
    graph = {m: {i for i in _imports(m) if i in MODULES and _within(i, "functions") and i != m}
             for m in MODULES if _within(m, "functions")}
    found, state = [], {}

    def visit(module, path):
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                found.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return found


def test_no_import_circles_among_the_functions_modules():
    """Kubernetes access sits below what uses it (functions.kube.client): cluster -> rollout.kube ->
    delivery.taint -> cs_lookup -> cluster was such a circle."""
    assert [" -> ".join(c) for c in _cycles()] == []
