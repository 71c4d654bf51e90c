"""Run with a Python that has only the standard library and pynvml: every node_bootstrap module must
import, and none may pull in the function side's dependencies. Exits non-zero with the offending module."""

import importlib
import os
import pkgutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
FORBIDDEN = ("pydantic", "paramiko", "aliyunsdkcore", "alibabacloud_cs20151215", "alibabacloud_tea_openapi",
             "functions", "yaml")

import node_bootstrap  # noqa: E402

count = 0
for info in pkgutil.walk_packages(node_bootstrap.__path__, "node_bootstrap."):
    if info.name.endswith("__main__"):
        continue
    importlib.import_module(info.name)
    count += 1
leaked = sorted(m for m in sys.modules if m.split(".")[0] in FORBIDDEN)
if leaked:
    sys.exit("node_bootstrap imported function-side modules: %s" % ", ".join(leaked))
for name in FORBIDDEN:
    if name == "functions":  # the repo root is on sys.path, so the function package is always importable
        continue
    try:
        importlib.import_module(name)
    except ImportError:
        continue
    sys.exit("the node check environment must not have %s installed" % name)
print("node_bootstrap: %d modules import with stdlib + pynvml only (%s)" % (count, sys.version.split()[0]))
