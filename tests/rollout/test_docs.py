"""docs/operations.md documents every rollout setting and every RBAC rule of deploy/rbac.yaml."""

import os

import yaml

from functions.base import settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_operations_doc_lists_every_rollout_setting_and_rbac_rule():
    doc = open(os.path.join(ROOT, "docs", "operations.md"), encoding="utf-8").read()
    missing = [v.name for v in settings.ENV_VARS if v.section == "rollout" and "| `%s` | `%s` |" % (v.name, v.default)
               not in doc]
    assert missing == []
    with open(os.path.join(ROOT, "deploy", "rbac.yaml")) as fh:
        role = next(d for d in yaml.safe_load_all(fh) if d["kind"] == "ClusterRole")
    for rule in role["rules"]:
        for resource in rule["resources"]:
            row = "| `%s` | %s |" % (resource, ", ".join("`%s`" % v for v in rule["verbs"]))
            assert row in doc, row
