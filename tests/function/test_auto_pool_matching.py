"""Auto pools, demand and supply (issue 27): which waiting pods a pool could take, and what its GPUs hold.

Pod and Node objects are the API's JSON as the scheduler reads them; each rule's upstream source is cited in
functions/decision/layout/matching.py.
"""

import pytest

from functions.decision.layout.matching import (MAX_COUNT, Place, ask_problem, demand_of, is_unschedulable,
                                                owner_of, pod_asks, profile_of_resource, split_pending, why_not)
from functions.kube.supply import node_supply

POOL = {"alibabacloud.com/nodepool-id": "np-auto", "gpu": "a100", "zone": "b"}
TAINT = {"key": "nvidia.com/gpu", "value": "mig", "effect": "NoSchedule"}


def pod(name="p", limits=None, selector=None, affinity=None, tolerations=None, phase="Pending",
        scheduled=("False", "Unschedulable"), node="", owner=None, labels=None, init=None):
    spec = {"containers": [{"name": "c", "resources": {"limits": dict(limits or {"nvidia.com/mig-1g.10gb": "1"})}}]}
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"limits": dict(init)}}]
    if selector:
        spec["nodeSelector"] = selector
    if affinity is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if node:
        spec["nodeName"] = node
    meta = {"name": name, "namespace": "llm", "labels": dict(labels or {})}
    if owner:
        meta["ownerReferences"] = [dict(owner, controller=True)]
    conditions = [{"type": "PodScheduled", "status": scheduled[0], "reason": scheduled[1]}] if scheduled else []
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, "conditions": conditions}}


TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def test_resource_names_map_back_to_catalogue_profiles():
    assert profile_of_resource("nvidia.com/mig-1g.10gb") == "1g.10gb"
    assert profile_of_resource("nvidia.com/mig-1g.10gb.me") == "1g.10gb+me"
    assert profile_of_resource("nvidia.com/mig-1g.12gb.me.all") == "1g.12gb+me.all"
    assert profile_of_resource("nvidia.com/gpu") == "gpu"
    assert profile_of_resource("cpu") is None



@pytest.mark.parametrize("value, count", [
    # whole quantities in every form k8s.io/apimachinery's ParseQuantity reads (quantity.go: a signed number
    # with an optional fraction, then a decimal SI, binary SI or "e" exponent suffix), as a hand-written
    # snapshot may hold them (the API server writes the canonical form: "1", "1k", "1e3", "1Ki")
    ("2", 2), (2, 2), (2.0, 2), ("+2", 2), ("02", 2), ("1.0", 1), ("1.", 1), ("1000m", 1), ("2000m", 2),
    ("10e-1", 1), ("0.01k", 10), ("1E1", 10), ("1e3", MAX_COUNT), (".5k", MAX_COUNT), ("1Ki", MAX_COUNT),
    ("1e99", MAX_COUNT), ("1e100", MAX_COUNT), ("1E", MAX_COUNT), ("-0", 0), ("0e400", 0),
    # not whole, or no quantity: the pod is not counted, with its reason
    ("1.5", None), ("0.5", None), ("1500m", None), ("1e-1", None), ("1e-400", None), ("-1", None), ("-1k", None),
    ("1.5Ki", MAX_COUNT), ("0.5Ki", MAX_COUNT),  # 1536 and 512: whole
    ("\u0661", None), ("1_0", None), (" 1", None), ("1 ", None), ("0x1", None), ("1e1.5", None), ("", None),
    (".", None), ("1m", None), ("1.5", None), (True, None), (1.5, None), ("NaN", None), ("1kk", None),
    ("1" + "0" * 60, None),
    # an exponent of any length (suffix.go interpret: ParseInt(.., 10, 64), then int32(parsed)); the value is
    # capped at the largest int64 (quantity.go), still whole: more than a node holds, not "no whole quantity"
    ("1e1000000", MAX_COUNT), ("1E+1000000", MAX_COUNT), ("1e-1000000", None), ("1e4294967297", 10),
    ("1e9223372036854775808", None),  # past int64: ParseInt fails, no quantity
])
def test_a_count_is_read_as_kubernetes_reads_a_quantity(value, count):
    """The count reader took digits with one suffix only: "1000m", "1.0", "10e-1" and the number 2.0, all
    whole quantities to Kubernetes (ValidatePodSpec takes an extended resource whose MilliValue is a multiple
    of 1000), were a pod's refusal ("a pod may ask for a whole quantity"), and "1e100" too, where "1e99" was
    read as more than any node holds."""
    limits = {"nvidia.com/mig-1g.10gb": value}
    p = pod(limits=limits)
    if count is None:
        assert pod_asks(p) == {} and "may ask for a whole quantity" in ask_problem(p)
    else:
        assert pod_asks(p) == ({"1g.10gb": count} if count else {}) and ask_problem(p) == ""

def test_asks_sum_containers_and_take_the_larger_init_container():
    p = pod(limits={"nvidia.com/mig-2g.20gb": "1", "cpu": "2"}, init={"nvidia.com/mig-2g.20gb": "3"})
    p["spec"]["containers"].append({"name": "d", "resources": {"requests": {"nvidia.com/mig-2g.20gb": "1",
                                                                             "nvidia.com/mig-1g.10gb": "2"}}})
    assert pod_asks(p) == {"1g.10gb": 2, "2g.20gb": 3}


def test_a_sidecar_init_container_counts_beside_the_containers_as_the_scheduler_counts_it():
    # k8s.io/component-helpers/resource/helpers.go PodRequests: a restartPolicy Always init container keeps
    # running, so its ask adds to the containers' and to every later init step's
    from functions.decision.layout.matching import waiting_pod
    from functions.kube.demand import slim

    one = {"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}
    p = pod()  # the app container asks one 1g.10gb
    p["spec"]["initContainers"] = [dict(one, name="proxy", restartPolicy="Always")]
    assert pod_asks(p) == {"1g.10gb": 2}  # was 1: the plan served the pod with one instance, it never bound
    # a plain init container after the sidecar runs beside it: 1 + 2 = 3, more than the 2 that run later
    p["spec"]["initContainers"].append({"name": "warm", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "2"}}})
    assert pod_asks(p) == {"1g.10gb": 3}
    # before the sidecar starts it does not: 2 alone, and 1 + 1 afterwards
    p["spec"]["initContainers"].reverse()
    assert pod_asks(p) == {"1g.10gb": 2}
    # every reader agrees: the pod event's reduced pod and the tick's
    p["spec"]["initContainers"].reverse()
    assert pod_asks(slim(p)) == pod_asks(waiting_pod(p)) == {"1g.10gb": 3}


def test_only_unschedulable_pending_pods_are_demand():
    assert is_unschedulable(pod())
    assert not is_unschedulable(pod(scheduled=None))  # not tried yet
    assert not is_unschedulable(pod(scheduled=("False", "SchedulingGated")))
    # another scheduler's pod (Volcano, a second profile) is demand as well: it wrote that it found no room,
    # and it needs the same resources on a node its selectors and taints allow (docs/auto-pools.md)
    other = pod()
    other["spec"]["schedulerName"] = "volcano"
    assert is_unschedulable(other) and split_pending([other], {"np": [Place(POOL, [])]})[0]["np"]
    assert not is_unschedulable(pod(node="n1"))  # bound: waiting for its kubelet, not for capacity
    assert not is_unschedulable(pod(phase="Running"))


@pytest.mark.parametrize("spec, fits", [
    (dict(selector={"gpu": "a100"}), True),
    (dict(selector={"gpu": "h100"}), False),
    (dict(affinity={"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In",
                                                                 "values": ["h100", "a100"]}]}]}), True),
    (dict(affinity={"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "NotIn",
                                                                 "values": ["a100"]}]}]}), False),
    (dict(affinity={"nodeSelectorTerms": [{"matchExpressions": [{"key": "spot", "operator": "NotIn",
                                                                 "values": ["true"]}]}]}), True),  # absent key
    (dict(affinity={"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]}), True),
    (dict(affinity={"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}]}),
     False),
    # terms are ORed: the second one fits
    (dict(affinity={"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["x"]}]},
                                          {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}),
     True),
    (dict(affinity={"nodeSelectorTerms": [{}]}), False),  # an empty term matches nothing
    (dict(affinity={"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                            "values": ["n1"]}]}]}), False),
    # a term naming nodes by field, ORed with one the pool's labels meet: the second lets the pod land on any
    # node of the pool (nodeaffinity.go: terms ORed); the pod was not counted at all
    (dict(affinity={"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["elsewhere"]}]},
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}]}), True),
    # a term with both is ANDed: read as naming nodes, never as the labels alone
    (dict(affinity={"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["elsewhere"]}],
         "matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}]}), False),
    # Gt and Lt read integers as Go's strconv.ParseInt(v, 10, 64) does (labels.Requirement.Matches): "1_0" and
    # a number past int64 are no integers there, so the term matches no node (Python's int() read 10 and 10^19)
    (dict(affinity={"nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "Gt",
                                                                 "values": ["9"]}]}]}), False),
    (dict(affinity={"nodeSelectorTerms": [{"matchExpressions": [{"key": "big", "operator": "Gt",
                                                                 "values": ["1"]}]}]}), False),
    (dict(affinity={"nodeSelectorTerms": [{"matchExpressions": [{"key": "slots", "operator": "Gt",
                                                                 "values": ["+3"]}]}]}), True),
    (dict(affinity={"nodeSelectorTerms": [{"matchExpressions": [{"key": "slots", "operator": "Lt",
                                                                 "values": ["-1"]}]}]}), False),
])
def test_node_selector_and_required_affinity(spec, fits):
    labels = dict(POOL, gen="1_0", big="1" + "0" * 19, slots="4")
    assert (why_not(pod(tolerations=TOLERATE, **spec), labels, [TAINT]) == "") is fits
    # the pod as the tick's list reduces it says the same
    from functions.decision.layout.matching import waiting_pod
    assert (why_not(waiting_pod(pod(tolerations=TOLERATE, **spec)), labels, [TAINT]) == "") is fits


@pytest.mark.parametrize("tolerations, fits", [
    ([], False),
    ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "mig", "effect": "NoSchedule"}], True),
    ([{"key": "nvidia.com/gpu", "value": "mig"}], True),  # Equal is the default, an empty effect matches all
    ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "other"}], False),
    ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], False),
    ([{"operator": "Exists"}], True),  # empty key + Exists tolerates everything
])
def test_tolerations_against_blocking_taints(tolerations, fits):
    assert (why_not(pod(tolerations=tolerations), POOL, [TAINT]) == "") is fits
    # PreferNoSchedule never blocks
    assert why_not(pod(tolerations=tolerations), POOL, [dict(TAINT, effect="PreferNoSchedule")]) == ""


def test_split_counts_what_a_pool_takes_and_reports_the_rest():
    pods = [pod("a", tolerations=TOLERATE, selector={"gpu": "a100"},
                owner={"kind": "ReplicaSet", "name": "serve-7d9f"}, labels={"pod-template-hash": "7d9f"}),
            pod("b", selector={"gpu": "a100"}),  # no toleration
            pod("c", tolerations=TOLERATE, limits={"cpu": "1"}),  # asks for no GPU: ignored
            pod("d", tolerations=TOLERATE, phase="Running", node="n1")]
    by_pool, unmatched = split_pending(pods, {"np-auto": [Place(POOL, [TAINT])]})
    assert [(d.key, d.owner, d.profile) for d in by_pool["np-auto"]] == [("llm/a", "deployment llm/serve",
                                                                         "1g.10gb")]
    assert unmatched == [("llm/b", "np-auto: taint nvidia.com/gpu=mig:NoSchedule not tolerated")]


def test_owner_is_the_controller():
    assert owner_of(pod(owner={"kind": "StatefulSet", "name": "db"})) == "statefulset llm/db"
    assert owner_of(pod("solo")) == "pod llm/solo"
    assert [d.count for d in demand_of(pod(limits={"nvidia.com/mig-3g.40gb": "2"}))] == [2]


def node(name="n1", sequence="2g.20gb-2g.20gb-3g.40gb", state="success", count="2"):
    labels = {"aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB", "aliyun.accelerator/nvidia_count": count}
    if state:
        labels["nvidia.com/mig.config.state"] = state
    if sequence:
        labels["aliyun.accelerator/nvidia_mig_sequence"] = sequence
    return {"metadata": {"name": name, "labels": labels}}


def test_supply_places_the_applied_sequence_and_marks_what_pods_could_use():
    # The label is the normalized sequence (start order) the node wrote; placements are the node solver's.
    # The node has reported no holders: the pod's three 2g.20gb may be any three of the four, so all four
    # count as in use (tests/function/test_auto_pool_holders.py has the reported case).
    running = [pod("r1", phase="Running", node="n1", limits={"nvidia.com/mig-2g.20gb": "3"}),
               pod("done", phase="Succeeded", node="n1", limits={"nvidia.com/mig-3g.40gb": "1"})]
    gpus, notes = node_supply(node(), running)
    assert notes == []
    assert [(g.index, [(i.profile, i.start, i.in_use) for i in g.instances]) for g in gpus] == [
        (0, [("2g.20gb", 0, True), ("2g.20gb", 2, True), ("3g.40gb", 4, False)]),
        (1, [("2g.20gb", 0, True), ("2g.20gb", 2, True), ("3g.40gb", 4, False)])]


def test_supply_leaves_nodes_in_flight_or_without_a_layout_alone():
    assert all(g.busy for g in node_supply(node(state="pending"), [])[0])
    assert not any(g.mig for g in node_supply(node(state=None, sequence=None), [])[0])
    gpus, notes = node_supply(node(count="x"), [])
    assert gpus == [] and "count 'x' unknown" in notes[0]
    gpus, notes = node_supply(node(sequence="9g.99gb"), [])
    assert gpus == [] and "cannot be read" in notes[0]


def test_supply_reads_the_per_gpu_layouts_the_node_wrote():
    n = node(sequence=None)
    n["metadata"]["annotations"] = {"ack-mig-hook/gpu-layouts": '{"0":[["7g.80gb",0]],"1":[["1g.10gb",0],["3g.40gb",4]]}'}
    gpus, notes = node_supply(n, [pod("r", phase="Running", node="n1", limits={"nvidia.com/mig-3g.40gb": "1"})])
    assert notes == [] and [[(i.profile, i.start, i.in_use) for i in g.instances] for g in gpus] == [
        [("7g.80gb", 0, False)], [("1g.10gb", 0, False), ("3g.40gb", 4, True)]]
    n["metadata"]["annotations"]["ack-mig-hook/gpu-layouts"] = '{"0": []}'  # GPU 1 missing
    assert node_supply(n, [])[0] == [] and "cannot be read" in node_supply(n, [])[1][0]


def test_refusals_are_why_not_on_every_place():
    """``refusals`` works out each pod's places as bit sets (indexed labels and taints) rather than testing every
    pod on every place; on random places and pods (every operator, matchFields, empty terms, tolerations of
    every form) it says, per place, what ``why_not`` says of the first pod in pod order that refuses it."""
    import random

    from functions.decision.layout.matching import Place, pod_key, refusals, why_not

    keys, values = ["a", "b", "zone", "n"], ["", "1", "2", "x", "10", "-3", "1_0"]
    effects = ["NoSchedule", "NoExecute", "PreferNoSchedule", ""]
    operators = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"]
    for seed in range(300):
        rnd = random.Random(seed)

        def taint():
            return {"key": rnd.choice(keys), "value": rnd.choice(values), "effect": rnd.choice(effects[:3])}

        places = [Place({k: rnd.choice(values) for k in rnd.sample(keys, rnd.randint(0, 4))},
                        [taint() for _ in range(rnd.randint(0, 2))]) for _ in range(rnd.randint(1, 12))]
        pods = []
        for i in range(rnd.randint(1, 8)):
            spec = {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}
            if rnd.random() < 0.4:
                spec["nodeSelector"] = {k: rnd.choice(values) for k in rnd.sample(keys, rnd.randint(1, 2))}
            if rnd.random() < 0.7:
                terms = []
                for _ in range(rnd.randint(0, 3)):
                    term = {"matchExpressions": [
                        {"key": rnd.choice(keys), "operator": rnd.choice(operators),
                         "values": rnd.sample(values, rnd.randint(0, 2))} for _ in range(rnd.randint(0, 2))]}
                    if rnd.random() < 0.15:
                        term["matchFields"] = [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
                    terms.append(term)
                spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": terms}}}
            spec["tolerations"] = [{k: v for k, v in (("key", rnd.choice(keys + [""])),
                                                     ("operator", rnd.choice(["Exists", "Equal", ""])),
                                                     ("value", rnd.choice(values)), ("effect", rnd.choice(effects)))
                                    if v} for _ in range(rnd.randint(0, 3))]
            pods.append({"metadata": {"name": "p%d" % i, "namespace": "ns"}, "spec": spec})
        expected = []
        for place in places:
            misses = ((pod_key(p), why_not(p, place.labels, place.taints)) for p in sorted(pods, key=pod_key))
            expected.append(next(("%s (%s)" % (key, miss) for key, miss in misses if miss), ""))
        assert refusals(pods, places) == expected, seed


def test_a_pod_of_many_sidecars_each_asking_its_own_resource_is_read_only_past_the_bound(monkeypatch):
    """Each init step copies what the sidecars before it ask, so a pod of 16,000 sidecars asking a MIG resource
    name each (1.5 MiB: valid, any name under nvidia.com/ is) cost ~50 s of CPU to sum, on every list of the
    pending pods or of its node's pods. Past MAX_ASKED distinct names every reader counts the pod as beyond
    what it reads, so the containers after that point are no longer read. (MAX_CONTAINERS, meant to bound this,
    was never used: a pod of more containers is valid, and one asking a few names is summed whole.)"""
    from functions.decision.layout import matching
    from functions.kube.demand import bound_pod

    read = [0]
    real = matching._resource_asks

    def counted(container, bad=None):
        read[0] += 1
        return real(container, bad)

    monkeypatch.setattr(matching, "_resource_asks", counted)
    sidecars = [{"name": "s%d" % i, "restartPolicy": "Always",
                 "resources": {"limits": {"nvidia.com/mig-%d" % i: "1"}}} for i in range(2000)]
    p = pod()
    p["spec"]["initContainers"] = sidecars
    assert pod_asks(p) and read[0] <= matching.MAX_ASKED + 2, read
    p["spec"]["nodeName"], p["status"] = "n1", {"phase": "Running"}
    assert bound_pod(p) is None  # kubelet admits no such pod: it holds nothing
    many = pod()  # many containers asking the same resource: summed whole, not cut at a count of containers
    many["spec"]["initContainers"] = [dict(s, resources={"limits": {"nvidia.com/mig-1g.10gb": "1"}})
                                      for s in sidecars[:300]]
    assert pod_asks(many) == {"1g.10gb": MAX_COUNT}
