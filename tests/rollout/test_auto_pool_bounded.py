"""Hostile but valid demand on the test API server (issue 35, items 2 and 7): the Pending-pod list keeps only
pods that wait for MIG instances or GPUs, and only bounded parts of each, read item by item in pages of 16;
a pod beyond those bounds, one asking more than a node holds, or a count of 10**8 is "not counted" and
changes nothing; the pods beside them are planned as if they were not there. Speed and memory of the same
workloads: bench/demand_hostile.py."""

import json

import pytest

from functions.decision.layout.matching import Place
from functions.kube.client import KubeApi
from functions.kube.demand import PENDING_PAGE, pending_pods
from node_bootstrap.kube import load_kubeconfig
from tests.rollout.test_auto_pool_advise import POOL_ID, TOLERATE, inventory, live_advice, waiting
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

A100_80 = "NVIDIA-A100-SXM4-80GB"


def eight_gpu_node(api, name, sequence="7g.80gb"):
    api.add_node(name, labels={"alibabacloud.com/nodepool-id": POOL_ID, "aliyun.accelerator/nvidia_name": A100_80,
                               "aliyun.accelerator/nvidia_count": "8", "nvidia.com/mig.config.state": "success",
                               "aliyun.accelerator/nvidia_mig_sequence": sequence},
                 taints=[{"key": "nvidia.com/gpu", "value": "mig", "effect": "NoSchedule"}])


def big_affinity(values=60_000):
    """About 1 MB of required node affinity: one In expression over many host names (valid for the API)."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                               "values": ["host-%06d.example.internal" % i for i in range(values)]}]}]}}}


def unschedulable(api, name, resources, affinity=None, extra=None):
    pod = api.add_pod("batch", name, "", phase="Pending", resources=resources)
    with api.lock:
        pod["spec"]["tolerations"] = list(TOLERATE)
        if affinity is not None:
            pod["spec"]["affinity"] = affinity
        pod["spec"].update(extra or {})
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return pod


def client(api, tmp_path):
    return KubeApi(load_kubeconfig(api.write_kubeconfig(tmp_path / "c.conf", cert=api.admin_cert())))


def test_the_pending_list_keeps_only_waiting_mig_pods_and_bounded_parts_of_each(kube_api, tmp_path):  # noqa: F811
    affinity = big_affinity()
    assert len(json.dumps(affinity)) > 1_000_000
    for i in range(20):  # ask for no GPU, 1 MB of affinity each: dropped as each is decoded
        unschedulable(kube_api, "cpu-%02d" % i, {"cpu": "1"}, affinity)
    unschedulable(kube_api, "huge", {"nvidia.com/mig-1g.10gb": "1"}, affinity)  # beyond the bounds
    env = [{"name": "E%d" % i, "value": "x" * 100} for i in range(200)]
    unschedulable(kube_api, "fair", {"nvidia.com/mig-1g.10gb": "2", "cpu": "4"},
                  extra={"nodeSelector": {"gpu": "a100"}, "containers": [
                      {"name": "main", "env": env, "resources": {"limits": {"nvidia.com/mig-1g.10gb": "2"}}},
                      {"name": "side", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1k"}}}]})
    kube_api.add_pod("batch", "bound", "n1", phase="Pending", resources={"nvidia.com/mig-1g.10gb": "1"})
    api = client(kube_api, tmp_path)
    try:
        pods = pending_pods(api)
    finally:
        api.close()
    assert [p["metadata"]["name"] for p in pods] == ["fair", "huge"]
    fair, huge = pods
    # the parts the matcher reads, nothing else; asks summed ("1k" is a quantity: 1000, capped at 113)
    assert fair["spec"] == {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "113"}}}],
                            "nodeSelector": {"gpu": "a100"}, "tolerations": [{"key": "nvidia.com/gpu",
                                                                                "operator": "Exists"}]}
    assert huge["beyond"] == "larger than the hook reads: node affinity has more than 1024 values"
    assert "affinity" not in huge["spec"] and len(json.dumps(pods)) < 2_000
    # pages of 16: 23 Pending pods (the bound one too: the field selector is the phase) in two pages
    lists = [r.query for r in kube_api.requests if r.path == "/api/v1/pods"]
    assert len(lists) == 2 and all("limit=%d" % PENDING_PAGE in q for q in lists)


def test_pods_no_node_can_hold_are_not_counted_and_change_nothing(kube_api, tmp_path, capsys):  # noqa: F811
    for n in range(2):
        eight_gpu_node(kube_api, "n%d" % n)  # 16 idle 7g.80gb; a node holds at most 56 x 1g.10gb
    waiting(kube_api, "greedy-57", "1g.10gb", count=57, owner="greedy")
    waiting(kube_api, "greedy-224", "1g.10gb", count=224, owner="greedy")
    waiting(kube_api, "greedy-1e8", "1g.10gb", count=10 ** 8, owner="greedy")
    waiting(kube_api, "lacking", "1g.12gb", owner="lacking")  # an H100 96GB profile: no A100 has it
    unschedulable(kube_api, "huge", {"nvidia.com/mig-1g.10gb": "1"}, big_affinity())
    waiting(kube_api, "fair", "7g.80gb", owner="fair")  # an idle 7g.80gb serves it as it is
    advice = live_advice(kube_api, tmp_path, capsys)
    assert advice["demand"]["pending"] == {"7g.80gb": 1}
    why = {p["pod"]: p["why"] for p in advice["demand"]["not_counted"]}
    assert why == {
        "llm/greedy-57": "asks 57x 1g.10gb, more than a node of the pool holds (at most 56 on 8 GPUs)",
        "llm/greedy-224": "asks over 112x 1g.10gb, more than a node of the pool holds (at most 56 on 8 GPUs)",
        "llm/greedy-1e8": "asks over 112x 1g.10gb, more than a node of the pool holds (at most 56 on 8 GPUs)",
        "llm/lacking": "asks 1g.12gb, which no GPU of the pool has (A100-80GB)",
        "batch/huge": "larger than the hook reads: node affinity has more than 1024 values"}
    # nothing changes, nothing is unserved, no new node is asked for
    assert advice["plan"]["changes"] == 0 and advice["plan"]["unserved"] == {} and advice["plan"]["new_node"] == []
    assert all(g["change"] == "none" for g in advice["gpus"])
    assert {r.method for r in kube_api.requests} == {"GET"}


def test_a_greedy_pod_leaves_the_pool_to_the_pods_after_it(kube_api, tmp_path, capsys):  # noqa: F811
    eight_gpu_node(kube_api, "n0", sequence="3g.40gb-3g.40gb")  # 8 GPUs of 2 idle 3g.40gb
    waiting(kube_api, "greedy", "1g.10gb", count=224, owner="greedy")
    for i in range(2):
        waiting(kube_api, "small-%d" % i, "1g.10gb", owner="small")
    advice = live_advice(kube_api, tmp_path, capsys)
    assert [p["pod"] for p in advice["demand"]["not_counted"]] == ["llm/greedy"]
    assert advice["demand"]["pending"] == {"1g.10gb": 2} and advice["plan"]["unserved"] == {}
    # one GPU repartitioned for the two small pods; the other seven stay as they are
    assert advice["plan"]["changes"] == 1
    changed = [g for g in advice["gpus"] if g["change"] != "none"]
    assert len(changed) == 1 and sum(1 for p, _ in changed[0]["create"] if p == "1g.10gb") >= 2


def test_a_list_page_is_read_item_by_item_under_the_reader_rule():
    import pytest

    from functions.kube.client import read_list_page
    from node_bootstrap.outside import OutsideDataError

    seen, kept = [], []

    def reduce(item):
        seen.append(item["n"])
        return None if item["n"] % 2 else item["n"]

    page = b'{"kind": "PodList", "items": [{"n": 1}, {"n": 2} ,{"n": 4}], "metadata": {"continue": "t"}}'
    assert read_list_page(page, reduce, kept) == {"kind": "PodList", "metadata": {"continue": "t"}}
    assert seen == [1, 2, 4] and kept == [2, 4]
    assert read_list_page(b'{"items": null, "metadata": {}}', reduce, kept) == {"items": None, "metadata": {}}
    for bad in (b'{"items": [{"n": 6}, {"n": 8}', b'{"items": [{"n": NaN}]}', b'[1]', b'{"items": [{"n": 6}]} x',
                b'{"items": [' + b'[' * 100 + b']' * 100 + b']}'):
        with pytest.raises(OutsideDataError):
            read_list_page(bad, lambda item: item, kept)
    assert kept == [2, 4]  # a page that breaks the rule appends nothing


def test_each_bound_of_what_the_matcher_reads_holds_at_its_limit_and_refuses_beyond():
    from functions.decision.layout.matching import (MAX_RULES, MAX_TERMS, MAX_TEXT, MAX_TOLERATIONS, MAX_VALUES,
                                                    waiting_pod, why_not)

    def pod(spec):
        return {"metadata": {"name": "p", "namespace": "ns"},
                "spec": dict(spec, containers=[{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]),
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                               "reason": "Unschedulable"}]}}

    def terms(n, per=1, values=1):
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "k%d" % j, "operator": "NotIn", "values": ["v%d" % v for v in range(values)]}
                                  for j in range(per)]} for _ in range(n)]}}}

    cases = [  # (spec at the limit, spec one beyond, what the reason names)
        ({"nodeSelector": {"k%d" % i: "v" for i in range(MAX_RULES)}},
         {"nodeSelector": {"k%d" % i: "v" for i in range(MAX_RULES + 1)}}, "more than 64 pairs"),
        ({"affinity": terms(1, MAX_RULES)}, {"affinity": terms(1, MAX_RULES + 1)}, "more than 64 rules"),
        ({"affinity": terms(MAX_TERMS)}, {"affinity": terms(MAX_TERMS + 1)}, "more than 64 terms"),
        ({"affinity": terms(1, 1, MAX_VALUES)}, {"affinity": terms(1, 1, MAX_VALUES + 1)}, "more than 1024 values"),
        ({"tolerations": [{"operator": "Exists"}] * MAX_TOLERATIONS},
         {"tolerations": [{"operator": "Exists"}] * (MAX_TOLERATIONS + 1)}, "more than 64 tolerations"),
        ({"nodeSelector": {"k": "v" * MAX_TEXT}}, {"nodeSelector": {"k": "v" * (MAX_TEXT + 1)}}, "longer than 1024"),
    ]
    labels = {"k": "v" * MAX_TEXT, **{"k%d" % i: "v" for i in range(MAX_RULES + 1)}}
    for at, beyond, named in cases:
        assert "beyond" not in waiting_pod(pod(at))
        assert why_not(pod(at), labels, []) == "", named
        reduced = waiting_pod(pod(beyond))
        assert named in reduced["beyond"] and why_not(pod(beyond), labels, []).startswith("larger than the hook reads")
        assert len(json.dumps(reduced)) < 1000


def test_the_filed_needless_repartition_is_not_planned(kube_api, tmp_path, capsys):  # noqa: F811
    """Issue 35's snapshot shape: idle instances serve the waiting pods; the plan once destroyed an idle
    3g.20gb on a GPU nothing uses ("3g.20gb idle + 2g.10gb idle + 1g.5gb+me idle -> 2g.10gb + 1g.5gb+me
    for nothing", the exact solve's answer: it keeps the pods off that GPU, which the scheduler does anyway)."""
    def node(name, layouts):
        kube_api.add_node(name, labels={"alibabacloud.com/nodepool-id": POOL_ID,
                                        "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-40GB",
                                        "aliyun.accelerator/nvidia_count": str(len(layouts)),
                                        "nvidia.com/mig.config.state": "success"},
                          annotations={"ack-mig-hook/gpu-layouts": json.dumps(
                              {str(i): layout for i, layout in enumerate(layouts)})},
                          taints=[{"key": "nvidia.com/gpu", "value": "mig", "effect": "NoSchedule"}])

    node("n0", [[["4g.20gb", 0]]])
    node("n1", [[["2g.10gb", 0], ["1g.5gb+me", 2]], [["3g.20gb", 0]],
                [["1g.5gb+me", 0], ["2g.10gb", 2], ["3g.20gb", 4]]])
    waiting(kube_api, "big", "4g.20gb", owner="big")
    for i in range(2):
        waiting(kube_api, "mid-%d" % i, "3g.20gb", owner="mid")
    advice = live_advice(kube_api, tmp_path, capsys)
    assert advice["demand"]["pending"] == {"3g.20gb": 2, "4g.20gb": 1} and advice["plan"]["unserved"] == {}
    assert not any("for nothing" in r for r in advice["plan"]["reasons"])
    # no GPU loses an instance unless it gets one: nothing is destroyed for nothing
    assert all(not g["destroy"] or g["create"] for g in advice["gpus"]), advice["gpus"]


def test_a_pod_whose_parts_have_the_wrong_type_is_that_pods_reason_and_the_list_goes_on():
    """Found by a review: a wrong-typed affinity raised AttributeError in the matcher, which ended the whole
    pending list, and a list item that is not an object ended ``slim`` (every pods_on and pod-event read)."""
    import copy

    from functions.decision.layout.matching import waiting_pod, why_not
    from functions.kube.demand import slim

    pod = {"metadata": {"name": "p", "namespace": "n"},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
           "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                          "reason": "Unschedulable"}]}}
    for affinity in ("x", {"nodeAffinity": ["x"]}, ["x"]):
        odd = copy.deepcopy(pod)
        odd["spec"]["affinity"] = affinity
        assert "not a map" in waiting_pod(odd)["beyond"]
        assert why_not(odd, {}, []).startswith("larger than the hook reads")
    for part, key, value in (("status", "conditions", ["x", 7]), ("spec", "containers", ["x"]),
                             ("spec", "initContainers", [7, None]), ("metadata", "annotations", "kubernetes.io/config.mirror")):
        odd = copy.deepcopy(pod)
        odd[part][key] = value
        reduced = slim(odd)
        assert reduced["metadata"]["name"] == "p" and "annotations" not in reduced["metadata"]
        assert all(isinstance(c, dict) for c in reduced["spec"]["containers"] + reduced["status"]["conditions"])
    assert slim({"metadata": "x", "spec": [], "status": 5})["spec"] == {"containers": [], "initContainers": []}


@pytest.mark.parametrize("required, named", [
    ("x", "required node affinity is not a map"), (7, "required node affinity is not a map"),
    (["x"], "required node affinity is not a map"),
    ({"nodeSelectorTerms": "x"}, "nodeSelectorTerms is not a list"),
    ({"nodeSelectorTerms": {"matchExpressions": []}}, "nodeSelectorTerms is not a list"),
])
def test_required_affinity_of_another_type_is_that_pods_reason_and_the_list_goes_on(required, named):
    """``requiredDuringSchedulingIgnoredDuringExecution`` that was no map raised AttributeError out of
    ``waiting_pod``, the reduction of the paged list of Pending pods, so one such pod ended the tick of every
    auto pool and every pod event; ``nodeSelectorTerms`` that was no list was reported as "more than 64
    terms". Each is that pod's reason now, naming the part, and the other pods are counted."""
    from functions.decision.layout.matching import split_pending, waiting_pod, why_not

    def waiting_pod_doc(name, affinity=None):
        spec = {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}
        if affinity is not None:
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}}
        return {"metadata": {"name": name, "namespace": "n"}, "spec": spec,
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                               "reason": "Unschedulable"}]}}

    odd, fine = waiting_pod(waiting_pod_doc("odd", required)), waiting_pod(waiting_pod_doc("fine"))
    assert odd["beyond"] == "larger than the hook reads: " + named
    assert why_not(waiting_pod_doc("odd", required), {}, []) == "larger than the hook reads: " + named
    counted, unmatched = split_pending([odd, fine], {"np": [Place({}, [])]})
    assert [d.key for d in counted["np"]] == ["n/fine"] and unmatched == [("n/odd", odd["beyond"])]


def test_many_pods_asking_several_profiles_each_cost_reads_per_node_not_per_pod_and_node(kube_api, tmp_path,  # noqa: F811
                                                                                         capsys, monkeypatch):
    """2,000 waiting pods, each asking a 1g.10gb and a 2g.20gb (one node must hold both), on 125 nodes of 8 idle
    7g.80gb: no node holds such a pod now, so each is unserved and asks for a new node. The planner looked for
    a node holding both by walking every instance of every node for every pod (pods x instances reads: 10,000
    such pods on 1,000 GPUs took 6 s of CPU, anyone who may create pods decides how many); it now counts each
    node's idle instances once and walks a node's instances only for a pod that node holds. The work is
    counted (how often an instance is asked whether it is held), through ``advise`` on a snapshot."""
    from functions.decision.layout import planner
    from tests.rollout.test_auto_pool_advise import advise

    names = ["n%03d" % i for i in range(125)]
    for name in names:
        eight_gpu_node(kube_api, name)
    for i in range(2000):
        unschedulable(kube_api, "pair-%04d" % i, {"nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-2g.20gb": "1"})
    items = [dict(n, kind="Node") for n in kube_api.nodes.values()] + [dict(p, kind="Pod")
                                                                       for p in kube_api.pods.values()]
    reads = [0]
    held = planner._Inst.held

    def counted(inst):
        reads[0] += 1
        return held.fget(inst)

    monkeypatch.setattr(planner._Inst, "held", property(counted))
    code, out, err = advise(capsys, "--inventory", inventory(tmp_path, kubernetes={"kind": "List", "items": items},
                                                             members=names), "--json")
    assert code == 0, err
    advice = json.loads(out)
    assert advice["demand"]["pending"] == {"1g.10gb": 2000, "2g.20gb": 2000}
    assert advice["plan"]["unserved"] == {"1g.10gb": 2000, "2g.20gb": 2000} and advice["plan"]["changes"] == 0
    assert advice["plan"]["new_node_shape"], advice["plan"]
    # 1,000 instances in the pool: a few reads each (5,000), not each once per pod (4,004,000 before)
    assert reads[0] <= 10_000, reads[0]


def test_the_tick_names_the_waiting_pods_no_pool_counts_in_one_bounded_line(kube_api, tmp_path, capsys):  # noqa: F811
    """Pods anyone may write that the pool never plans for (more instances than a node holds, a profile no GPU
    has, a megabyte of affinity) fail alone: the pods beside them are planned. ``advise`` named them; the tick
    said nothing of them, so the function's log never told why such a pod waits for good. It names them now
    in one line a tick, bounded however many there are and however long their names (up to 253 characters)."""
    from functions.commands.main import main

    eight_gpu_node(kube_api, "n0", sequence="3g.40gb-3g.40gb")
    waiting(kube_api, "greedy", "1g.10gb", count=57, owner="greedy")
    waiting(kube_api, "lacking", "1g.12gb", owner="lacking")
    unschedulable(kube_api, "huge", {"nvidia.com/mig-1g.10gb": "1"}, big_affinity(2000))
    long_names = ["%s-%03d" % ("z" * 240, i) for i in range(40)]  # after the others in pod order
    for name in long_names:
        waiting(kube_api, name, "1g.10gb", count=10 ** 6, owner="greedy")
    waiting(kube_api, "fair", "1g.10gb", owner="fair")
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "k.conf", cert=kube_api.admin_cert())
    event = tmp_path / "tick.json"
    event.write_text(json.dumps({"auto_pools": True}))
    code = main(["invoke", "--event", str(event), "--inventory", inventory(tmp_path, members=["n0"]),
                 "--kubeconfig", kubeconfig, "--dry-run", "--json", "-v"])
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert code == 0 and result["outcome"] == "done", out
    assert [d["node_name"] for d in result["decisions"]] == ["n0"]  # the fair pod is planned beside them
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    (said,) = [line["reason"] for line in lines if "no auto pool counts" in line.get("reason", "")]
    assert said.startswith("43 waiting pod(s) no auto pool counts, never planned for: "), said[:200]
    assert "batch/huge (larger than the hook reads: node affinity has more than 1024 values)" in said, said
    assert "llm/greedy (asks 57x 1g.10gb, more than a node of the pool holds (at most 56 on 8 GPUs))" in said
    assert "llm/lacking (asks 1g.12gb, which no GPU of the pool has (A100-80GB))" in said
    assert "llm/fair" not in said and len(said) < 2500, said
    assert said.endswith(" more (ack-mig-hook advise lists them)"), said[-200:]


def test_pods_anyone_binds_to_a_pools_node_neither_fill_memory_nor_stop_its_plan(kube_api, tmp_path, capsys,  # noqa: F811
                                                                                monkeypatch):
    """A pod may be created with ``spec.nodeName`` set (pods create rights suffice; kubelet may refuse it, Failed,
    and it stays until the terminated-pod GC's 12,500): a node's pod list then holds whatever they carry, up to
    1.5 MiB each. It was one answer decoded whole and every pod kept with its affinity and labels: 45 such pods
    made the answer larger than the client reads (64 MiB), so the pool's pods were never read and the pool never
    planned (every tick ended in retry); fewer of them filled the function's memory. Now the node's list is
    decoded pod by pod, only pods holding MIG instances or GPUs kept (and only what the supply readers use of
    them), and an answer larger than the client reads is read again in pages of 16. The client's bound is
    12 MiB here (30 pods of 0.5 MB: a page of 16 is 8 MB), the same rule at a size the test server writes
    quickly."""
    from functions.kube import client as client_module
    from functions.kube.demand import pods_on
    from tests.rollout.test_auto_pool_advise import gpu_node

    monkeypatch.setattr(client_module, "MAX_ANSWER_BYTES", 12 * 1024 * 1024)
    gpu_node(kube_api, "n1", "1g.10gb-1g.10gb-2g.20gb")
    kube_api.add_pod("llm", "running", "n1", resources={"nvidia.com/mig-1g.10gb": "1"})
    affinity = big_affinity(15_000)
    assert 470_000 < len(json.dumps(affinity)) < 500_000
    for i in range(30):
        pod = kube_api.add_pod("batch", "bound-%02d" % i, "n1", phase=("Running", "Failed")[i % 2],
                               resources={"cpu": "1"}, labels={"l%04d" % j: "v" for j in range(500)})
        with kube_api.lock:
            pod["spec"]["affinity"] = affinity
    waiting(kube_api, "small", "1g.10gb")
    api = client(kube_api, tmp_path)
    try:
        held = pods_on(api, ["n1"])
    finally:
        api.close()
    assert [p["metadata"]["name"] for p in held["n1"]] == ["running"]
    assert len(json.dumps(held)) < 1000, held
    advice = live_advice(kube_api, tmp_path, capsys)  # exit 2 before: the list of n1's pods could not be read
    assert advice["demand"]["in_use"] == {"1g.10gb": 1} and advice["demand"]["pending"] == {"1g.10gb": 1}
    assert advice["plan"]["unserved"] == {} and not [u for u in advice["plan"]["unplaced"] if "n1" in u]
    lists = [r.query for r in kube_api.requests if r.path == "/api/v1/pods" and "nodeName" in r.query]
    assert any("resourceVersion=0" in q and "limit" not in q for q in lists), lists  # from the watch cache first
    assert any("limit=%d" % PENDING_PAGE in q for q in lists), lists  # then in pages, being larger than read


def test_many_small_pending_pods_do_not_run_the_pending_list_past_its_pages(kube_api, tmp_path, capsys,  # noqa: F811
                                                                           monkeypatch):
    """The Pending list came in pages of 16 (a pod may be 1.5 MiB) and a list stops after 1,000 pages, so
    16,001 Pending pods (any pods: a batch queue, or anyone's, asking no GPU at all) ended every tick in
    ``retry`` and no auto pool was planned again while they waited. A page of small pods now asks for twice
    as many next time (up to 500), and one larger than the client reads is asked again at 16. Here pages
    of 1 (PENDING_PAGE, as other tests set it) stand for 16: 1,001 Pending pods would take 1,001 pages. After
    them come 60 pods of 0.5 MB with the client's bound at 12 MiB (as in the test above): the page of 500 that
    would hold them is larger than it reads, and is asked again at 1."""
    from functions.kube import client as client_module, demand

    monkeypatch.setattr(demand, "PENDING_PAGE", 1)
    monkeypatch.setattr(client_module, "MAX_ANSWER_BYTES", 12 * 1024 * 1024)
    eight_gpu_node(kube_api, "n0")
    with kube_api.lock:
        for i in range(1000):
            kube_api.pods[("queue", "job-%04d" % i)] = kube_api._stamp({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "job-%04d" % i, "namespace": "queue", "uid": "u-job-%04d" % i},
                "spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]},
                "status": {"phase": "Pending"}})
    affinity = big_affinity(15_000)
    for i in range(60):  # "zz/...": listed after "llm/fair" and "queue/..."
        pod = kube_api.add_pod("zz", "large-%02d" % i, "", phase="Pending", resources={"cpu": "1"})
        with kube_api.lock:
            pod["spec"]["affinity"] = affinity
    waiting(kube_api, "fair", "7g.80gb", owner="fair")
    kube_api.requests.clear()
    advice = live_advice(kube_api, tmp_path, capsys)  # exit 2 before: "more than 1000 pages; stopped"
    assert advice["demand"]["pending"] == {"7g.80gb": 1} and advice["plan"]["unserved"] == {}, advice["demand"]
    lists = [r.query for r in kube_api.requests if r.path == "/api/v1/pods" and "Pending" in r.query]
    limits = [int(q.split("limit=")[1].split("&")[0]) for q in lists]
    assert limits[:10] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 500], limits  # the small pods: 1,023 in 10 pages
    assert len(lists) <= 24 and 1 in limits[10:], limits  # the large ones asked again at 1, then more again


def test_pages_of_large_pending_pods_do_not_grow(kube_api, tmp_path, capsys):  # noqa: F811
    """Pages grew while one was under a quarter of the client's bound (16 MiB): 16 pods of 1 MB each (the
    hostile benchmark's) made the next page 32 of them, and the function's peak went from 130 to 230 MiB of
    its 512 MB. A page grows only while twice it stays within GROWN_PAGE_BYTES (4 MiB): 20 pods of about
    270 KB come in two pages of 16, not 16 and 32."""
    from functions.kube.client import GROWN_PAGE_BYTES

    eight_gpu_node(kube_api, "n0")
    affinity = big_affinity(9_000)
    for i in range(20):
        pod = kube_api.add_pod("zz", "large-%02d" % i, "", phase="Pending", resources={"cpu": "1"})
        with kube_api.lock:
            pod["spec"]["affinity"] = affinity
    assert 16 * len(json.dumps(affinity)) * 2 > GROWN_PAGE_BYTES  # a page of 16: no room to double
    waiting(kube_api, "fair", "7g.80gb", owner="fair")
    kube_api.requests.clear()
    advice = live_advice(kube_api, tmp_path, capsys)
    assert advice["demand"]["pending"] == {"7g.80gb": 1}, advice["demand"]
    lists = [r.query for r in kube_api.requests if r.path == "/api/v1/pods" and "Pending" in r.query]
    limits = [int(q.split("limit=")[1].split("&")[0]) for q in lists]
    assert limits == [16, 16], limits


def test_a_pod_asking_thousands_of_mig_resources_is_not_counted_and_keeps_nothing_of_them(kube_api, tmp_path,  # noqa: F811
                                                                                          capsys):
    """Any name under ``nvidia.com/`` is a valid extended resource, and Kubernetes bounds how many a pod asks only
    by its size: a pod may ask 40,000 ``nvidia.com/mig-*`` resources (no node has them: it waits). The Pending
    list kept every one of them of each waiting pod (a 1.5 MiB pod stayed 1.5 MiB, a hundred of them past the
    function's memory). No GPU has more than 11 profiles, so a pod asking more than 16 MIG or GPU resources
    is larger than the hook reads: not counted, and only its first few asks are kept, to name it."""
    from functions.decision.layout.matching import MAX_ASKED

    eight_gpu_node(kube_api, "n0")
    for i in range(3):
        unschedulable(kube_api, "wide-%d" % i, {"nvidia.com/mig-%dg.%dgb" % (1 + j % 7, j): "1" for j in range(2000)})
    unschedulable(kube_api, "at-limit", {"nvidia.com/mig-%dg.%dgb" % (1 + j % 7, j): "1" for j in range(MAX_ASKED)})
    waiting(kube_api, "fair", "7g.80gb", owner="fair")
    api = client(kube_api, tmp_path)
    try:
        pods = pending_pods(api)
    finally:
        api.close()
    assert len(json.dumps(pods)) < 6000, len(json.dumps(pods))
    advice = live_advice(kube_api, tmp_path, capsys)
    assert advice["demand"]["pending"] == {"7g.80gb": 1}
    why = {p["pod"]: p["why"] for p in advice["demand"]["not_counted"]}
    assert why["batch/wide-0"] == "larger than the hook reads: asks more than 16 MIG or GPU resources (no GPU has " \
                                  "more than 11 profiles)", why
    assert "larger than" not in why["batch/at-limit"], why  # 16: read, and not counted for a profile no GPU has


def test_pods_whose_constraints_all_differ_are_not_tested_on_every_node_each(kube_api, tmp_path, capsys,  # noqa: F811
                                                                            monkeypatch):
    """The plan keeps to the nodes every counted pod could land on, read per node as the first pod that cannot;
    pods that say the same are read once, but anyone may make every pod say something else (a toleration of a
    taint no node has, of its own: valid, and it fits everywhere). Each of 600 such pods was tested on each of
    125 nodes (pods x nodes: 2,000 pods on 1,000 nodes took 3.2 s of CPU); each pod's nodes are now worked
    out as a bit set from labels and taints indexed once, and a node's line read only for the pod that refuses
    it. Counted: how often a pod's rules are tested on one place, through ``advise`` on a snapshot."""
    from functions.decision.layout import matching
    from tests.rollout.test_auto_pool_advise import advise, gpu_node

    names = ["n%03d" % i for i in range(125)]
    for name in names:
        gpu_node(kube_api, name, "7g.80gb")
    for i in range(600):
        waiting(kube_api, "own-%03d" % i, "1g.10gb", tolerations=TOLERATE + [{"key": "own-%d" % i,
                                                                                "operator": "Exists"}])
    items = [dict(n, kind="Node") for n in kube_api.nodes.values()] + [dict(p, kind="Pod")
                                                                       for p in kube_api.pods.values()]
    tests = [0]
    why_not = matching._Rules.why_not

    def counted(self, labels, taints):
        tests[0] += 1
        return why_not(self, labels, taints)

    monkeypatch.setattr(matching._Rules, "why_not", counted)
    code, out, err = advise(capsys, "--inventory", inventory(tmp_path, kubernetes={"kind": "List", "items": items},
                                                             members=names), "--json")
    assert code == 0, err
    advice = json.loads(out)
    assert advice["demand"]["pending"] == {"1g.10gb": 600} and advice["demand"]["not_counted"] == []
    assert not [u for u in advice["plan"]["unplaced"] if "cannot land" in u]  # every node is planned
    # about one test a pod (the pool it matches), where there were 75,600 (each pod on each node, once more)
    assert tests[0] <= 1000, tests[0]


def test_a_snapshot_pod_whose_request_and_limit_differ_counts_its_request_as_the_scheduler_does(tmp_path, capsys):
    """The API server refuses an extended resource whose request and limit differ (``ValidatePodSpec``), but a
    hand-written snapshot may hold one: kube-scheduler counts requests (``PodRequests``; a limit only stands for
    a request that is not given, the API's defaulting), and the hook read the limit over it."""
    from tests.rollout.test_auto_pool_advise import advise

    node = {"kind": "Node", "metadata": {"name": "n0", "labels": {
        "alibabacloud.com/nodepool-id": POOL_ID, "aliyun.accelerator/nvidia_name": A100_80,
        "aliyun.accelerator/nvidia_count": "8", "nvidia.com/mig.config.state": "success",
        "aliyun.accelerator/nvidia_mig_sequence": "7g.80gb"}}, "spec": {}, "status": {}}
    pods = [{"kind": "Pod", "metadata": {"name": name, "namespace": "llm"},
             "spec": {"tolerations": TOLERATE, "containers": [{"resources": resources}]},
             "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                            "reason": "Unschedulable"}]}}
            for name, resources in (("differ", {"requests": {"nvidia.com/mig-1g.10gb": "3"},
                                                "limits": {"nvidia.com/mig-1g.10gb": "1"}}),
                                    ("limit-only", {"limits": {"nvidia.com/mig-2g.20gb": "2"}}))]
    code, out, err = advise(capsys, "--inventory", inventory(tmp_path, kubernetes={"kind": "List",
                                                                                   "items": [node] + pods},
                                                             members=["n0"]), "--json")
    assert code == 0, err
    assert json.loads(out)["demand"]["pending"] == {"1g.10gb": 3, "2g.20gb": 2}
