"""kubectl drain as an oracle for the project's drain rules (functions/rollout/drain.py).

500 seeded pod populations (owners, DaemonSets present or gone, mirror pods, phases, terminating pods,
volumes, GPU and other resources), each judged by kubectl's own filters (k8s.io/kubectl/pkg/drain, through
``controlplane drain-verdicts``: tests/controlplane/drain.go) and by ``drain.verdict``, under the four
settings where the two have the same switches:

    kubectl --force             <-> ACK_MIG_DRAIN_FORCE=true
    kubectl --delete-emptydir-data <-> ACK_MIG_DRAIN_EMPTYDIR=any (and without it: none)
    kubectl --ignore-daemonsets (always: the project always leaves DaemonSet pods)

Every pod must get the same verdict (delete = EVICT, skip = LEAVE, error = REFUSE) unless it is in one of
the differences the project chose, listed in DELIBERATE with why; a new kind of disagreement fails the
test with the pod, both verdicts and the seed. ``ACK_MIG_DRAIN_EMPTYDIR=memory`` (the default) has no
kubectl flag and is not compared.
"""

import json
import random
import subprocess

import pytest

from functions.rollout import drain as dr
from tests.kube_real import conftest

pytestmark = pytest.mark.kube_real

POPULATIONS = 500
SEED = 26
OPTIONS = [(False, False), (False, True), (True, False), (True, True)]  # (force, delete emptyDir data)

# Where the project parts from kubectl drain on purpose: (class, why).
DELIBERATE = {
    "no-gpu": "the project moves only the pods that hold the GPUs; kubectl drains every pod",
    "finished": "a Succeeded/Failed pod holds no GPU: the project leaves it, kubectl deletes it",
    "terminating": "the project waits for a terminating pod; kubectl evicts it again",
    "orphaned-daemonset-pod": "a pod whose DaemonSet is gone: the project leaves every DaemonSet pod; kubectl "
                              "refuses it (deletes it with --force)",
}

GPU_RESOURCES = [{"nvidia.com/gpu": "1"}, {"nvidia.com/mig-1g.10gb": "2"}, {"aliyun.com/gpu-mem": "8"},
                 {"aliyun.com/gpu-core.percentage": "30"}]
OTHER_RESOURCES = [{}, {"cpu": "1"}, {"memory": "1Gi", "cpu": "500m"}]


def _resources(rng):
    pool = GPU_RESOURCES if rng.random() < 0.6 else OTHER_RESOURCES
    section = rng.choice(["limits", "requests"])
    chosen = dict(rng.choice(pool))
    return {section: chosen} if chosen else {}


def _pod(rng, index, daemonsets):
    namespace = rng.choice(["team-a", "team-b"])
    meta = {"name": "p%d" % index, "namespace": namespace, "uid": "uid-%d" % index}
    spec = {"containers": [{"name": "c%d" % c, "image": "x", "resources": _resources(rng)}
                           for c in range(rng.choice([1, 1, 2]))]}
    if rng.random() < 0.2:
        spec["initContainers"] = [{"name": "init", "image": "x", "resources": _resources(rng)}]
    if rng.random() < 0.05:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "claim-%d" % index}]
    owner = rng.choices(["none", "ReplicaSet", "DaemonSet", "StatefulSet", "Job", "ReplicationController"],
                        [20, 35, 20, 10, 5, 10])[0]
    if owner != "none":
        ref = {"apiVersion": "batch/v1" if owner == "Job" else "v1" if owner == "ReplicationController"
               else "apps/v1", "kind": owner, "name": "%s-%d" % (owner.lower(), rng.randrange(3)),
               "uid": "owner-uid"}
        controller = rng.choices([True, False, None], [85, 10, 5])[0]
        if controller is not None:
            ref["controller"] = controller
        meta["ownerReferences"] = [ref]
        if owner == "DaemonSet" and rng.random() < 0.8:
            daemonsets[(namespace, ref["name"])] = {
                "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": ref["name"],
                                                                          "namespace": namespace}}
    if rng.random() < 0.06:
        meta["annotations"] = {"kubernetes.io/config.mirror": "hash"}
    if rng.random() < 0.1:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    volumes = rng.choices([[], [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
                           [{"name": "scratch", "emptyDir": {}}],
                           [{"name": "shm", "emptyDir": {"medium": "Memory"}}, {"name": "scratch", "emptyDir": {}}],
                           [{"name": "cfg", "configMap": {"name": "cfg"}}],
                           [{"name": "host", "hostPath": {"path": "/data"}}]], [45, 15, 15, 10, 10, 5])[0]
    if volumes:
        spec["volumes"] = volumes
    phase = rng.choices(["Running", "Pending", "Succeeded", "Failed"], [70, 10, 10, 10])[0]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def populations():
    rng = random.Random(SEED)
    out = []
    for n in range(POPULATIONS):
        daemonsets = {}
        pods = [_pod(rng, i, daemonsets) for i in range(rng.randint(1, 16))]
        out.append({"id": str(n), "pods": pods, "daemonsets": list(daemonsets.values()),
                    "options": [{"force": f, "deleteEmptyDirData": e} for f, e in OPTIONS]})
    return out


def _daemonset_gone(pod, daemonsets):
    meta = pod["metadata"]
    ref = dr._controller(meta)
    return ref.get("kind") == "DaemonSet" and (meta["namespace"], ref.get("name")) not in daemonsets


def _deliberate(pod, kind, why, daemonsets):
    if kind == dr.LEAVE and why == "uses no GPU":
        return "no-gpu"
    if kind == dr.LEAVE and why == "finished":
        return "finished"
    if kind == dr.WAIT:
        return "terminating"
    if kind == dr.LEAVE and _daemonset_gone(pod, daemonsets):
        return "orphaned-daemonset-pod"
    return None


SAME = {dr.EVICT: "delete", dr.LEAVE: "skip", dr.REFUSE: "error"}


def test_the_drain_rules_agree_with_kubectl_drain_except_where_documented():
    cases = populations()
    answer = subprocess.run([conftest.BINARY, "drain-verdicts"], input="".join(json.dumps(c) + "\n" for c in cases),
                            capture_output=True, text=True, timeout=120, check=True)
    oracle = {line["id"]: line["verdicts"] for line in map(json.loads, answer.stdout.splitlines())}
    assert len(oracle) == POPULATIONS

    agreed, classes, wrong = 0, {k: 0 for k in DELIBERATE}, []
    for case in cases:
        daemonsets = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in case["daemonsets"]}
        for (force, empty), verdicts in zip(OPTIONS, oracle[case["id"]]):
            rules = dr.Rules(force=force, emptydir="any" if empty else "none")
            for pod in case["pods"]:
                name = "%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"])
                kind, why = dr.verdict(pod, rules)
                kubectl = verdicts[name]
                if kind in SAME and SAME[kind] == kubectl["verdict"]:
                    agreed += 1
                    continue
                deliberate = _deliberate(pod, kind, why, daemonsets)
                if deliberate is not None:
                    classes[deliberate] += 1
                    continue
                wrong.append("population %s (seed %d), %s, rules %s: project %s (%s), kubectl %s (%s)\n  %s" % (
                    case["id"], SEED, name, rules, kind, why, kubectl["verdict"], kubectl.get("message"),
                    json.dumps(pod)))
    assert not wrong, "%d verdicts differ from kubectl drain's:\n%s" % (len(wrong), "\n".join(wrong[:10]))
    # Not vacuous: thousands of GPU pods compared, and every documented difference still seen.
    assert agreed > 5000, agreed
    assert all(classes.values()), classes
