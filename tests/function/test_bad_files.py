"""Issue 36 item 6: every malformed kubeconfig or inventory shape is a usage error (exit 2) naming the field,
never an internal error (exit 70): wrong types at every level, nesting 2,000 deep, huge strings; and a pod
asking for 10^29 instances is that pod's refusal with a reason.

The property tests mutate one field of a valid document at a time (the fields the readers use, every level
of the example snapshots) and run the command line's own reader; the explicit cases run the installed CLI
in a real subprocess."""

import contextlib
import copy
import io
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from functions.base.errors import BadInventory
from functions.base.settings import SettingsError
from functions.commands.main import explained, main
from functions.commands.status import checked_kubeconfig
from tests.support.cli_errors import error_text
from functions.decision.layout.matching import MAX_COUNT, ask_problem, pod_asks, split_pending, waiting_pod

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVENTORY = os.path.join(ROOT, "examples", "inventory.json")
AUTO = os.path.join(ROOT, "examples", "inventory-auto.json")

# ---- kubeconfig -----------------------------------------------------------------------------------

GOOD = {"apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443",
                                               "certificate-authority-data": "UEVN"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}
# Every field the reader uses, with the type it must have (kubeconfig's schema, k8s.io/client-go/tools/
# clientcmd/api/v1/types.go): str, list (of named entries), dict, bool.
FIELDS = [(("current-context",), str), (("clusters",), list), (("contexts",), list), (("users",), list),
          (("clusters", 0), dict), (("contexts", 0), dict), (("users", 0), dict),
          (("clusters", 0, "name"), str), (("contexts", 0, "name"), str), (("users", 0, "name"), str),
          (("clusters", 0, "cluster"), dict), (("contexts", 0, "context"), dict), (("users", 0, "user"), dict),
          (("contexts", 0, "context", "cluster"), str), (("contexts", 0, "context", "user"), str),
          (("clusters", 0, "cluster", "server"), str), (("clusters", 0, "cluster", "certificate-authority-data"), str),
          (("clusters", 0, "cluster", "certificate-authority"), str),
          (("clusters", 0, "cluster", "insecure-skip-tls-verify"), bool),
          (("users", 0, "user", "token"), str), (("users", 0, "user", "tokenFile"), str),
          (("users", 0, "user", "client-certificate"), str), (("users", 0, "user", "client-certificate-data"), str),
          (("users", 0, "user", "client-key"), str), (("users", 0, "user", "client-key-data"), str)]
WRONG = {str: [5, True, ["a"], {"a": "b"}, []], list: [5, "a", True, {"a": "b"}],
         dict: [5, "a", True, ["a"], []], bool: [5, "yes", ["a"], {"a": "b"}]}


def _set(doc, path, value):
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def _field_named(message, path):
    """The message names the field's path as the reader writes it (contexts[0].context.user) or its key."""
    text = "".join("[%d]" % p if isinstance(p, int) else ("." if i else "") + p for i, p in enumerate(path))
    return text in message or ("%s:" % path[-1]) in message


def _usage_error(path):
    with pytest.raises(SettingsError) as raised:
        checked_kubeconfig(path)
    code, text = explained(raised.value)
    assert code == 2 and "\n" not in str(raised.value), text
    return text


@settings(max_examples=120)
@given(st.sampled_from(FIELDS), st.data(), st.sampled_from(["yaml", "json"]))
def test_a_kubeconfig_with_any_field_of_the_wrong_type_is_a_usage_error_naming_it(tmp_path_factory, field, data,
                                                                                   form):
    path, kind = field
    value = data.draw(st.sampled_from(WRONG[kind]))
    doc = copy.deepcopy(GOOD)
    _set(doc, path, value)
    file = tmp_path_factory.mktemp("kc") / "config"
    file.write_text(json.dumps(doc) if form == "json" else yaml.safe_dump(doc, default_flow_style=False))
    text = _usage_error(str(file))
    assert _field_named(text, path), text


@settings(max_examples=30)
@given(st.integers(33, 2000), st.sampled_from(["mapping", "sequence", "json-object", "json-list"]))
def test_a_kubeconfig_nested_deep_is_refused_before_it_is_parsed(tmp_path_factory, depth, shape):
    """Nesting is bounded before parsing: 2,000 levels is one line, never a RecursionError."""
    text = {"mapping": "".join(" " * i + "a:\n" for i in range(depth)),
            "sequence": "".join(" " * i + "-\n" for i in range(depth)) + " " * depth + "a\n",
            "json-object": '{"a": ' * depth + "1" + "}" * depth,
            "json-list": '{"contexts": ' + "[" * depth + "]" * depth + "}"}[shape]
    file = tmp_path_factory.mktemp("kc") / "config"
    file.write_text(text)
    assert "nested deeper than 32 levels" in _usage_error(str(file))


def test_a_huge_kubeconfig_or_token_file_is_refused_without_reading_it_whole(tmp_path):
    big = tmp_path / "big"
    big.write_text("token: " + "a" * (5 << 20) + "\n")
    assert "larger than 4096 KiB" in _usage_error(str(big))
    token = tmp_path / "token"
    with open(str(token), "wb") as out:  # sparse: 2 MiB that read as zeros, never written
        out.truncate(2 << 20)
    # a device such as /dev/zero never ends: refused for what it is before any read (localfile.read_file)
    for path, said in ((str(token), "is larger than 1024 KiB"), ("/dev/zero", "not a regular file but a device")):
        doc = copy.deepcopy(GOOD)
        doc["users"][0]["user"] = {"tokenFile": path}
        conf = tmp_path / "k"
        conf.write_text(yaml.safe_dump(doc))
        with pytest.raises(SettingsError, match=r"tokenFile %s.*%s" % (re.escape(path), said)):
            checked_kubeconfig(str(conf))


@pytest.mark.parametrize("secret_line", ["    token:\n      eyJhbGciOiJSUzI1NiJ9.SecretPayloadPart\n",
                                         "    client-key-data:\n      LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0t\n",
                                         "    token: t\n  eyJhbGciOiJSUzI1NiJ9.SecretPayloadPart\n"])
def test_a_kubeconfig_line_that_does_not_parse_is_named_by_number_never_quoted(tmp_path, secret_line):
    """A credential wrapped onto a line of its own (a pasted token) was quoted, 40 characters of it, in the
    error line and the --json error object (found by the docs audit). The command runs as a person runs it."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\n"
                    "users:\n- name: u\n  user:\n" + secret_line +
                    "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n")
    for extra in ([], ["--json"]):
        done = subprocess.run([sys.executable, "-m", "functions.commands.main", "status", "--inventory", INVENTORY,
                               "--kubeconfig", str(path)] + extra, cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env={k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_"))})
        assert done.returncode == 2, done.stderr
        assert re.search(r"does not parse: line 1[12]: expected 'key: value'", error_text(done.stderr)), done.stderr
        assert "SecretPayload" not in done.stderr + done.stdout and "LS0tLS1" not in done.stderr + done.stdout


def test_the_node_reads_the_same_shapes_with_its_own_python(tmp_path):
    """The node's reader is the same code on its stdlib-only interpreter: a wrong shape is a KubeError naming
    the field there too (apply turns it into 'no Kubernetes access: ...', never a traceback)."""
    node_python = os.path.join(ROOT, ".venv-node", "bin", "python")
    if not os.path.exists(node_python):
        pytest.skip("no node interpreter at %s" % node_python)
    conf = tmp_path / "k"
    conf.write_text("contexts: 5\n")
    code = ("import sys; from node_bootstrap.kube.client import KubeError, load_kubeconfig\n"
            "try:\n    load_kubeconfig(sys.argv[1])\nexcept KubeError as exc:\n    print(exc)\n")
    done = subprocess.run([node_python, "-c", code, str(conf)], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": ROOT, "PATH": os.environ.get("PATH", "")})
    assert done.stdout.strip().endswith("contexts: expected a list of {name, context: {cluster, user}}, got a number"), \
        done


# ---- the filed cases, through the installed command line --------------------------------------------

FILED = {
    "contexts: [a]": ("apiVersion: v1\ncontexts: [a]\n", "contexts"),
    "contexts: [a] as JSON": ('{"contexts": ["a"]}', "contexts[0]: expected an object {name, context"),
    "contexts: 5": ("apiVersion: v1\ncontexts: 5\n", "contexts: expected a list"),
    "a non-string tokenFile": (yaml.safe_dump(dict(GOOD, users=[{"name": "u", "user": {"tokenFile": 5}}])),
                               "users[0].user.tokenFile: expected a file path, got a number"),
    "YAML nested 2,000 deep": ("".join(" " * i + "a:\n" for i in range(2000)), "nested deeper than 32 levels"),
    # a NUL in a path: open() raises ValueError, which no reader caught (an internal error, exit 70)
    "a NUL in tokenFile": (json.dumps(dict(GOOD, users=[{"name": "u", "user": {"tokenFile": "tok\u0000en"}}])),
                           "users[0].user.tokenFile: expected a file path, got text with a NUL byte"),
    "a NUL in client-certificate": (json.dumps(dict(GOOD, users=[{"name": "u", "user": {
        "client-certificate": "cert.pem\u0000", "client-key-data": "UEVN"}}])),
        "users[0].user.client-certificate: expected a file path, got text with a NUL byte"),
}


def cli(*argv, cwd=ROOT):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_"))}
    env["PYTHONPATH"] = ROOT
    return subprocess.run([sys.executable, "-m", "functions.commands.main"] + list(argv), cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("case", sorted(FILED))
def test_the_filed_kubeconfigs_exit_2_with_one_line_naming_the_field(tmp_path, case):
    text, named = FILED[case]
    (tmp_path / "k.conf").write_text(text)
    for argv in (["status", "--inventory", INVENTORY], ["advise", "--pool", "llm-auto", "--inventory", AUTO],
                 ["invoke", "--event", os.path.join(ROOT, "examples", "event.json"), "--inventory", INVENTORY,
                  "--dry-run"]):
        done = cli(*argv, "--kubeconfig", "k.conf", cwd=str(tmp_path))
        lines = done.stderr.splitlines()
        assert done.returncode == 2 and len(lines) == 1 and done.stdout == "", (argv[0], done.stderr)
        assert lines[0].startswith("ack-mig-hook: error: ") and named in lines[0], lines[0]


def test_an_inventory_nested_2000_deep_exits_2_in_one_line(tmp_path):
    with open(INVENTORY) as fh:
        text = fh.read().rstrip().rstrip("}") + ', "x": ' + "[" * 2000 + "]" * 2000 + "}"
    (tmp_path / "inv.json").write_text(text)
    for argv in (["status"], ["advise", "--pool", "llm-auto"]):
        done = cli(*argv, "--inventory", "inv.json", cwd=str(tmp_path))
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "inventory inv.json is nested too deeply (more than 64 levels); expected {" in done.stderr


def _auto_with_ask(value):
    with open(AUTO) as fh:
        data = json.load(fh)
    pod = next(i for i in data["kubernetes"]["items"] if i["kind"] == "Pod" and i["status"]["phase"] == "Pending")
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": value}
    return data, pod


def test_a_pod_asking_for_10_to_the_29_instances_is_not_counted_with_the_reason(tmp_path):
    """A whole quantity, however large, is read capped at MAX_COUNT (more than any node holds) before
    anything is expanded: the pod is not counted, and the reason names what a node holds."""
    data, pod = _auto_with_ask(str(10 ** 29))
    (tmp_path / "inv.json").write_text(json.dumps(data))
    done = cli("advise", "--pool", "llm-auto", "--inventory", "inv.json", "--json", cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    refused = {n["pod"]: n["why"] for n in json.loads(done.stdout)["demand"]["not_counted"]}
    key = "%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"])
    assert "asks over %dx 1g.10gb, more than a node of the pool holds" % (MAX_COUNT - 1) in refused[key], refused


@pytest.mark.parametrize("value", ["1.5", "-1", " 2", "\u0662", True, 1.5, None, "1" * 60, "1500m"])
def test_a_count_that_is_no_whole_quantity_is_the_pods_refusal(value):
    _, pod = _auto_with_ask(value)
    pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                         "reason": "Unschedulable"}]}
    pod["spec"].pop("nodeName", None)
    assert pod_asks(pod) == {} and ask_problem(pod).startswith("asks for nvidia.com/mig-1g.10gb=")
    _, unmatched = split_pending([pod], {})
    assert unmatched == [("%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"]), ask_problem(pod))]
    # reduced as the tick reads it (one page item at a time), the pod says the same
    reduced = waiting_pod(pod)
    assert reduced is not None and ask_problem(reduced) == ask_problem(pod)


@pytest.mark.parametrize("value,count", [("2", 2), (3, 3), ("1k", MAX_COUNT), (10 ** 29, MAX_COUNT),
                                         (str(MAX_COUNT), MAX_COUNT), ("0", None), (2.0, 2), ("1000m", 1)])
def test_a_whole_quantity_is_counted_capped(value, count):
    _, pod = _auto_with_ask(value)
    assert ask_problem(pod) == "" and pod_asks(pod) == ({"1g.10gb": count} if count else {})


# ---- inventories -------------------------------------------------------------------------------------

def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value[:2]):
            yield from _paths(item, path + (index,))


def _deep(n):
    value = 1
    for _ in range(n):
        value = [value]
    return value


RUNS = [(INVENTORY, ["status"]), (INVENTORY, ["invoke", "--event", os.path.join(ROOT, "examples", "event.json"),
                                              "--dry-run"]),
        (os.path.join(ROOT, "examples", "inventory-rollout.json"), ["status", "--nodes"]),
        (AUTO, ["advise", "--pool", "llm-auto"]), (AUTO, ["status"])]
CASES = []
for _file, _argv in RUNS:
    with open(_file) as _fh:
        _doc = json.load(_fh)
    CASES += [(_file, tuple(_argv), p) for p in _paths(_doc) if p]
BAD = [5, -1, 1.5, True, None, "x", "", [], {}, ["a"], {"a": 1}, [None], 10 ** 29, "y" * 200000, _deep(800)]


@settings(max_examples=400)
@given(st.sampled_from(CASES), st.sampled_from(BAD))
def test_an_inventory_with_any_field_of_the_wrong_shape_is_never_an_internal_error(tmp_path_factory, case, value):
    """Any field of the example snapshots, at any level, replaced by a value of another shape: the command
    either copes (the field is not read, or read leniently: exit 0, 1 or 3) or says in one line what is wrong
    with the snapshot (exit 2); never exit 70."""
    file, argv, path = case
    with open(file) as fh:
        doc = json.load(fh)
    _set(doc, path, value)
    target = tmp_path_factory.mktemp("inv") / "inv.json"
    target.write_text(json.dumps(doc))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv) + ["--inventory", str(target)])
    assert code in (0, 1, 2, 3), (path, value, err.getvalue())
    if code == 2:
        assert err.getvalue().startswith("ack-mig-hook: error: ") and "internal error" not in err.getvalue()


def test_snapshot_reader_refuses_what_is_not_a_snapshot(tmp_path):
    from functions.cloud.cluster import InventoryLookup

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(BadInventory, match="nested too deeply"):
        InventoryLookup.from_file(str(deep))
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"cluster_id": "c1", "nodepools": [{"nodepool_info": {"nodepool_id": "np1"},
                                                                     "kubernetes_config": {"labels": 5}}]}))
    with pytest.raises(BadInventory, match=r"nodepools\[0\]: kubernetes_config.labels must be a list"):
        InventoryLookup.from_file(str(labels))


@pytest.mark.parametrize("where, value, named", [
    (("nodepools", 0, "kubernetes_config"), "x", "nodepools[0].kubernetes_config: expected an object, got text"),
    (("nodepools", 0, "nodepool_info"), ["np"], "nodepools[0].nodepool_info: expected an object, got a list"),
    (("nodes", 0, "nodepool_id"), ["a"], "nodes[0].nodepool_id: expected text, got a list"),
    (("nodes", 0, "instance_id"), 7, "nodes[0].instance_id: expected text, got a number"),
    (("nodepools", 0, "kubernetes_config", "labels", 0, "value"), 5,
     "nodepools[0].kubernetes_config.labels[0].value: expected text, got a number")])
def test_a_snapshot_part_of_the_wrong_type_is_a_usage_error_naming_it(tmp_path, where, value, named):
    """docs/cli.md: a snapshot of the wrong shape is exit 2 naming the field. A pool whose kubernetes_config was
    text vanished from status, a node whose nodepool_id was a list left its pool, and a label value 5 became
    sequence=5, a profile id (found by the docs audit). Run as a person runs it."""
    with open(INVENTORY) as fh:
        doc = json.load(fh)
    part = doc
    for key in where[:-1]:
        part = part[key]
    part[where[-1]] = value
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(doc))
    done = subprocess.run([sys.executable, "-m", "functions.commands.main", "status", "--inventory", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_"))})
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert named in error_text(done.stderr)
