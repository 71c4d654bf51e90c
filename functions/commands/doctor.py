"""``ack-mig-hook doctor``: a read-only preflight that says, line by line, what is ready and what is missing.

Checks, each one line (``ok``, ``warn`` or ``PROBLEM``) with what to do about it:

* credentials: the standard chain finds some;
* cluster and pools: every labelled pool's label read by the same parser, solver and family table the
  function uses (an unfit label or a family without MIG shows here, before any node is touched);
* autoscaler: every labelled pool with auto scaling has the node pool tags that make ACK's
  cluster-autoscaler see its MIG resources (functions/decision/autoscaler_tags.py), or why it cannot have them;
* deployment: the ROS stack, the function and its triggers (EventBridge rules for Auto Scaling and the
  ActionTrail-recorded ACK operations, the timer) created;
* network: the function reaches the API server the way it will (the private endpoint that
  ``DescribeClusterUserKubeconfig`` names): ACK names one; the stack puts the function in the cluster's VPC
  (``VpcId``/``VSwitchId``/``SecurityGroupId``, read from ``DescribeClusterDetail``); its vSwitch is one of the
  cluster's (else what to make sure of: the vSwitch's VPC is not read here); its security group's outbound
  rules let TCP reach the endpoint (``DescribeSecurityGroups`` for the group's type,
  ``DescribeSecurityGroupAttribute`` for its egress rules, judged by functions/commands/stack/egress.py);
* nodes: the Cloud Assistant agent of each node in a labelled pool is online and new enough for the
  built-in parameters (Linux agent >= 2.2.3.309, RunCommand docs); a pool whose node list ACK refuses for
  good is one PROBLEM line, the other pools' nodes are checked;
* pod events (only with an auto pool, ``ack-mig-hook/layout=auto``): kube-eventer runs in kube-system with
  an EventBridge sink (and how often it pushes), the stack holds the pod event rule (``PodEventTrigger``), and
  when the function last saw a pod's ``FailedScheduling`` event (each pool's plan marker Lease);
* Kubernetes: the ``ack-mig-hook`` ClusterRole holds every rule of ``deploy/rbac.yaml`` and is bound;
  a RoleBinding in ``default`` grants ``events create`` through ``ack-mig-hook-events`` (the Role of
  ``deploy/rbac.yaml``, or the stack's ClusterRole of that name bound at namespace level); the NVIDIA device plugin runs with ``--mig-strategy=mixed``; NVIDIA GPU Operator's mig-manager is
  absent (nodes it manages are refused as ``conflict``).

Nothing is changed. Exit 0 when nothing is a PROBLEM, 1 otherwise; bad input and refused credentials end
with the codes of docs/cli.md (2, 4, 5) before any check is printed.
"""

import json
import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple
from urllib.parse import urlsplit

from functions.base import settings
from functions.commands import common, shipped
from functions.delivery.cloud_assistant import PARAMETER_AGENT, RUN_BATCH, agent_version
from node_bootstrap.outside import as_list, as_object, objects

RBAC_FILE = shipped.RBAC  # deploy/rbac.yaml, shipped with the package
ROLE_NAME = "ack-mig-hook"
EVENTS_ROLE = "ack-mig-hook-events"  # events create, in the namespace the function writes Events to only
EVENTS_NAMESPACE = "default"
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"
# RunCommand's built-in parameters such as {{ACS::InstanceId}} need this Linux agent: the transport's rule.
AGENT_MIN = PARAMETER_AGENT
MIG_MANAGER_LABEL = "nvidia.com/mig.config"
TRIGGER_TYPE = "ALIYUN::FC3::Trigger"
POD_EVENT_TRIGGER = "PodEventTrigger"  # template.yml: the EventBridge rule of pod FailedScheduling events
# kube-eventer (AliyunContainerService/kube-eventer, main.go): --sink=eventbridge:... sends to EventBridge, and
# --frequency (a Go duration, 30s by default) is how often it pushes what it has gathered.
EVENTER_DEFAULT_FREQUENCY = "30s"
# DescribeSecurityGroupAttribute pages rules by MaxResults (at most 1000, SDK model); the groups of one network
# interface hold at most 1000 rules in all (ECS limits), so one page is the rule and three a generous bound.
RULE_PAGE, RULE_PAGES = 1000, 3


class Check(NamedTuple):
    status: str  # ok, warn, PROBLEM
    area: str
    text: str


def configure(parser, command):
    common.add_cloud_options(parser, kubeconfig_help="kubeconfig for the Kubernetes checks (default: a 15-minute "
                                                     "one that ACK issues for the cluster's public endpoint)")
    common.add_stack_name(parser)
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")


# ---- the checks, each from facts already fetched (pure), so tests can read them one by one ----

def pool_checks(cluster_id: str, pools: List[Any]) -> List[Check]:
    from functions.decision.decide import decide_instance, has_partition_label
    from functions.base.model import Node

    labelled = [p for p in pools if has_partition_label(p)]
    out = [Check("ok" if labelled else "warn", "cluster", "%d node pools, %d with a partition label%s" % (
        len(pools), len(labelled), "" if labelled else
        ": label a GPU pool ack.aliyun.com/gpu-partition-size or -sequence to use the hook"))]
    rank = {"ok": 0, "warn": 1, "PROBLEM": 2}
    for pool in labelled:
        # Each allowed instance type judged on its own (as a node of that type would be), so a pool mixing
        # types shows what each one gets; the worst verdict is the pool's.
        samples = [Node(instance_id="(new)", instance_type=t, nodepool_id=pool.nodepool_id)
                   for t in pool.instance_types] or [None]
        verdicts = [decide_instance("(new instance)", node, pool, cluster_id) for node in samples]
        statuses = [{"partition": "ok", "skip": "warn", "error": "PROBLEM"}.get(v.action, "warn") for v in verdicts]
        text = "; ".join(dict.fromkeys("%s: %s" % (node.instance_type if node else "any instance type", v.reason)
                                       for node, v in zip(samples, verdicts)))
        out.append(Check(max(statuses, key=rank.get), "pool %s" % (pool.name or pool.nodepool_id), text))
    from functions.decision.waves import PAUSED_LABEL, paused

    for pool in pools:  # a pause is a person's choice, but one easily forgotten: said on every run
        if paused(pool.labels):
            out.append(Check("warn", "pool %s" % (pool.name or pool.nodepool_id), "paused (%s=true): its rollout "
                             "starts no new node; `ack-mig-hook rollout resume %s` when the change may go on"
                             % (PAUSED_LABEL, pool.nodepool_id)))
    return out


RECONCILE_KEY = "timer:reconcile"  # the reconcile timer's entry in the run record (template.yml ReconcileTimer)
DEFAULT_RECONCILE_S = 1800.0  # template.yml ReconcileSchedule's default, for a schedule that is not @every


def last_run_checks(info: Optional[Dict[str, Any]], schedule: str) -> List[Check]:
    """When the function last ran (its run record, functions/kube/last_run.py) and whether the reconcile timer runs:
    a PROBLEM when its last run is older than twice ``schedule`` (the stack's ReconcileSchedule), the "no run"
    alert's rule (template.yml NoRunAlert). ``info``: what ``last_run.read`` gave, None when not read."""
    from functions.decision import run_record as lr

    if info is None:
        return []
    if info.get("error"):
        return [Check("warn", "last run", "the run record (Lease default/%s) was not read: %s"
                      % (lr.RECORD_LEASE, info["error"]))]
    record = info.get("record")
    if record is None:
        return [Check("warn", "last run", "no run recorded yet (Lease default/%s): the function writes it at the end "
                      "of each run; none has ended since this version was deployed" % lr.RECORD_LEASE)]
    last = record["last"]
    now = info["now"]
    out = [Check("ok", "last run", "%s ago, %s: %s" % (_ago(int(max(0, now - last["at"]))),
                                                      lr.trigger_key(last["trigger"], last["event_type"]),
                                                      lr.summary(last)))]
    interval = lr.every_seconds(schedule) or DEFAULT_RECONCILE_S
    late, ago = lr.late(record, RECONCILE_KEY, now, interval)
    if ago is None:
        out.append(Check("PROBLEM", "reconcile timer", "no run of the reconcile timer recorded: check the stack's "
                         "ReconcileTimer trigger and the function's invocations in the FC console"))
    elif late:
        out.append(Check("PROBLEM", "reconcile timer", "last ran %s ago, more than twice its schedule (%s): the timer "
                         "trigger or the function is broken; check the FC console's invocations"
                         % (_ago(int(ago)), schedule or "@every 30m")))
    else:
        out.append(Check("ok", "reconcile timer", "last ran %s ago (schedule %s)" % (_ago(int(ago)),
                                                                                    schedule or "@every 30m")))
    return out


def autoscaler_checks(pools: List[Any], mode: str) -> List[Check]:
    """Each labelled pool with auto scaling: does its template node advertise the layout's MIG resources?
    A pool that cannot be tagged (20-tag budget, key length, unknown GPU count) is a warning, not a
    problem: the function partitions its nodes all the same, but pods asking for MIG do not scale it out."""
    from functions.decision.autoscaler_tags import MODE_OFF, MODE_ON, TEMPLATE_RESOURCE, plan_pool
    from functions.decision.decide import has_partition_label

    out = []
    for pool in pools:
        if not (pool.auto_scaling and has_partition_label(pool)):
            continue
        area = "autoscaler %s" % (pool.name or pool.nodepool_id)
        decided = plan_pool(pool, MODE_ON)
        if decided is None:
            continue
        want = ", ".join("%s=%s" % (k[len(TEMPLATE_RESOURCE):], v) for k, v in sorted(decided.set.items()))
        if decided.in_sync:
            out.append(Check("ok", area, decided.reason))
        elif mode == MODE_OFF:
            out.append(Check("warn", area, "auto scaling is on but ACK_MIG_AUTOSCALER_TAGS=off: the autoscaler's "
                             "template does not advertise the layout (%s), so pods asking for MIG resources do not "
                             "scale this pool out" % (want or decided.reason)))
        elif decided.write is None:
            out.append(Check("warn", area, "%s; pods asking for MIG resources do not scale this pool out"
                             % decided.reason))
        else:
            gone = ", ".join(k[len(TEMPLATE_RESOURCE):] for k in decided.remove)
            out.append(Check("warn", area, "the tags differ from the layout (to set: %s%s): the next event or "
                             "reconcile writes them; if this stays, read the function's 'pool tags' log lines "
                             "(ACK may refuse keys over 64 characters)" % (want or "none",
                                                                          "; to remove: %s" % gone if gone else "")))
    return out


def stack_checks(stack: Optional[Dict[str, Any]], resources: List[Dict[str, Any]], name: str,
                 cluster: Optional[str] = None) -> List[Check]:
    """The stack, then its triggers; with ``cluster``, a stack that serves another cluster (``--stack-name``)
    is a PROBLEM whatever its status: its triggers and function work for that cluster, not this one."""
    if stack is None:
        return [Check("PROBLEM", "stack", "no ROS stack %s in this region: run ack-mig-hook deploy" % name)]
    foreign = common.not_ours(name, common.stack_parameters(stack), cluster) if cluster is not None else ""
    if foreign:
        return [Check("PROBLEM", "stack", "%s: give --stack-name of this cluster's stack" % foreign)]
    status = str(stack.get("Status", ""))
    good = status in ("CREATE_COMPLETE", "UPDATE_COMPLETE")
    from functions.base.textsafe import clip  # ROS's free text: one line, cut where it reads whole

    reason = clip(stack.get("StatusReason", ""), 200)
    if not good:  # what to do about it, as deploy says it (functions/commands/stack/ros.py)
        from functions.commands.stack.ros import advice

        reason = "%s%s%s" % (reason, "; " if reason else "", advice(status, name))
    out = [Check("ok" if good else "PROBLEM", "stack", "%s %s%s" % (name, status, "" if good else ": %s" % reason))]
    triggers = [r for r in resources if r.get("ResourceType") == TRIGGER_TYPE]
    if not triggers:
        out.append(Check("PROBLEM", "triggers", "the stack has no FC trigger: no event reaches the function"))
    for r in triggers:
        done = str(r.get("Status", "")).endswith("_COMPLETE")
        out.append(Check("ok" if done else "PROBLEM", "trigger %s" % r.get("LogicalResourceId"),
                         "%s%s" % (r.get("Status"), "" if done else ": " + clip(r.get("StatusReason", ""), 160))))
    return out


def _go_seconds(text: str) -> Optional[float]:
    """A Go duration as kube-eventer's flag takes it (``30s``, ``1m``, ``1m30s``, ``500ms``), in seconds."""
    import re

    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u] for n, u in parts)


def pod_event_checks(auto_pools: List[str], stack_found: bool, resources: List[Dict[str, Any]],
                     pods: List[Dict[str, Any]], markers: Dict[str, Any], now: float,
                     unread: Optional[Dict[str, str]] = None,
                     claims: Optional[Dict[str, Optional[Tuple[str, float]]]] = None) -> List[Check]:
    """Whether pod events reach the function, for the auto pools (their ids) only: the source in the cluster,
    the rule in the stack, the last event each pool's plan marker saw (``None``: not read), and the planning
    claim an event waited out, which the pool's later events end at once for (``unread``: a pool's note of one
    that does not read, and why; ``claims``: each pool's planning claim as read now, owner and end, ("", 0)
    for none, None where it was not read)."""
    if not auto_pools:
        return []
    out = []
    eventers = [p for p in pods if "eventer" in (p.get("metadata") or {}).get("name", "")]
    sinks = [(p, [a for a in _pod_args(p) if a.startswith("--sink=eventbridge")]) for p in eventers]
    sending = [(p, s) for p, s in sinks if s]
    if sending:
        pod, _ = sending[0]
        frequency = next((a.split("=", 1)[1] for a in _pod_args(pod) if a.startswith("--frequency=")),
                         EVENTER_DEFAULT_FREQUENCY)
        seconds = _go_seconds(frequency)
        late = seconds is None or seconds > 10
        out.append(Check("warn" if late else "ok", "pod events", "%s sends Kubernetes events to EventBridge every %s "
                         "(--frequency)%s" % (pod["metadata"]["name"], frequency,
                                              ": a waiting pod's event reaches the function up to that late; set "
                                              "--frequency=5s for starts in seconds" if late else "")))
    elif eventers:
        out.append(Check("warn", "pod events", "%s runs without an EventBridge sink: auto pools wait for their "
                         "timer (AutoPoolSchedule); enable the EventBridge sink of ack-node-problem-detector"
                         % eventers[0]["metadata"]["name"]))
    else:
        out.append(Check("warn", "pod events", "no kube-eventer in kube-system: auto pools wait for their timer "
                         "(AutoPoolSchedule); install ack-node-problem-detector with the EventBridge sink "
                         "(docs/auto-pools.md)"))
    if stack_found:
        rule = [r for r in resources if r.get("LogicalResourceId") == POD_EVENT_TRIGGER]
        if not rule:
            out.append(Check("PROBLEM", "pod event rule", "the stack has no %s: pod events never reach the "
                             "function; run ack-mig-hook deploy" % POD_EVENT_TRIGGER))
        elif str(rule[0].get("Status", "")).endswith("_COMPLETE"):
            out.append(Check("ok", "pod event rule", "%s: FailedScheduling of this cluster's pods reaches the "
                             "function" % POD_EVENT_TRIGGER))
    for pool in auto_pools:
        marker = markers.get(pool)
        if marker is None:
            continue
        last = marker.last or {}
        if not last.get("at"):
            out.append(Check("warn", "last pod event", "pool %s: none seen yet (one comes when a MIG pod of the "
                             "pool waits; if some have waited, events do not arrive)" % pool))
            continue
        ago = max(0, int(now - float(last["at"])))
        out.append(Check("ok", "last pod event", "pool %s: %s ago, pod %s%s" % (
            pool, _ago(ago), last.get("pod") or "?",
            "; a plan runs now" if marker.live(now) else "")))
    for pool in auto_pools:
        line = _waited_check(pool, markers.get(pool), (unread or {}).get(pool, ""), now, (claims or {}).get(pool))
        if line is not None:
            out.append(line)
    return out


def _waited_check(pool: str, marker: Any, problem: str, now: float,
                  claim: Optional[Tuple[str, float]] = None) -> Optional[Check]:
    """The planning claim a pod event of ``pool`` waited for and gave up on, as its plan marker notes it
    (functions/decision/coalesce.py, ``waited``): while it holds, the pool's events end at once and their pods
    wait for the timer. ``claim``: the pool's planning claim as read now (owner, end), as the events read it
    (its owner renews it while it works, so the noted end is only when it ran to then); None where it was
    not read: the noted end is all there is. None where there is no note (or the marker was not read)."""
    import time

    from functions.base.textsafe import clip
    from functions.decision.coalesce import waited_out

    if problem:
        return Check("warn", "claim waited out", "pool %s: the plan marker's note of a claim waited out does not "
                     "read (%s): pod events read it as none and wait for the claim themselves" % (pool,
                                                                                                 clip(problem, 160)))
    if marker is None or not marker.waited:
        return None
    owner = clip(marker.waited["owner"], 80)
    until = claim[1] if claim is not None and waited_out(marker, claim, now) else marker.waited["until"]
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(until))
    if claim is not None and not waited_out(marker, claim, now):
        return Check("ok", "claim waited out", "pool %s: the claim of invocation %s an event waited out is no "
                     "longer held (given back, run out or another's): the pool's pod events wait for a planning "
                     "claim again" % (pool, owner))
    if claim is None and until <= now:
        return Check("ok", "claim waited out", "pool %s: the claim of invocation %s an event waited out ended at "
                     "%s unless renewed (its Lease not read): the pool's pod events wait for a planning claim "
                     "again once it has" % (pool, owner, when))
    return Check("warn", "claim waited out", "pool %s: an event waited for invocation %s's planning claim and gave "
                 "up; the pool's pod events end at once while it holds, until %s (%s from now)%s unless it is "
                 "given back first, and their pods wait for the auto pool timer" % (
                     pool, owner, when, _ago(max(0, int(until - now))),
                     ", longer if renewed" if claim is not None else ", or later if renewed (its Lease not read)"))


def _ago(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return "%d %s" % (seconds // size, unit)
    return "%d s" % seconds


def network_checks(network: Any, params: Dict[str, str], stack_found: bool, egress: Any = None) -> List[Check]:
    """How the function reaches the API server: ``network`` from DescribeClusterDetail
    (functions/commands/stack/cluster_network.py), ``params`` the stack's parameters (GetStack), ``egress`` the
    verdict of the stack's security group on TCP to the endpoint (functions/commands/stack/egress.py), or the text of
    why it could not be read, or None when it was not asked."""
    endpoint = network.intranet_endpoint
    where = urlsplit(endpoint).netloc or endpoint
    if endpoint:
        out = [Check("ok", "api endpoint", "the API server's private endpoint is %s" % endpoint)]
    else:
        out = [Check("PROBLEM", "api endpoint", "ACK names no private API endpoint for cluster %s (no "
                     "intranet_api_server_endpoint in DescribeClusterDetail's master_url): the function cannot reach "
                     "the API server; check the cluster's API server in the ACK console" % network.cluster_id)]
    if not stack_found:
        return out  # the stack check says to deploy
    vpc, vswitch, group = (params.get(k, "") for k in ("VpcId", "VSwitchId", "SecurityGroupId"))
    fix = ("run `ack-mig-hook deploy` (it puts the function in the cluster's VPC) or deploy with --parameter "
           "VpcId=%s --parameter VSwitchId=%s --parameter SecurityGroupId=%s" % (
               network.vpc_id or "...", (network.vswitch_ids or ("...",))[0], network.security_group_id or "..."))
    if not vpc:
        return out + [Check("PROBLEM", "network", "the function is not in a VPC (the stack's VpcId is empty): it "
                            "cannot reach %s to lift startup taints or run rollouts; %s" % (where or "the API server",
                                                                                          fix))]
    if network.vpc_id and vpc != network.vpc_id:
        return out + [Check("PROBLEM", "network", "the function is in VPC %s, the cluster in %s: it cannot reach %s; %s"
                            % (vpc, network.vpc_id, where or "the API server", fix))]
    if not vswitch or not group:
        return out + [Check("PROBLEM", "network", "the stack's VpcId is set but %s empty: %s" % (
            " and ".join(k for k, v in (("VSwitchId", vswitch), ("SecurityGroupId", group)) if not v), fix))]
    out.append(Check("ok", "network", "the function runs in the cluster's VPC %s" % vpc))
    if vswitch in network.vswitch_ids:
        out.append(Check("ok", "network", "vSwitch %s is one of the cluster's" % vswitch))
    else:
        out.append(Check("warn", "network", "vSwitch %s is not one of the cluster's control-plane vSwitches (%s): make "
                         "sure it is in VPC %s, in a zone Function Compute supports" % (
                             vswitch, ", ".join(network.vswitch_ids) or "none listed", vpc)))
    out.append(_egress_check(group, network.security_group_id, endpoint, egress))
    return out


def _api_address(endpoint: str) -> "tuple":
    """(host, port) of the API server's endpoint URL; ("", 443) when it names none."""
    split = urlsplit(endpoint)
    return split.hostname or "", split.port or 443


def _egress_check(group: str, cluster_group: str, endpoint: str, egress: Any) -> Check:
    from functions.commands.stack.egress import ALLOW, DENY

    own = "the cluster's own" if group == cluster_group else "not the cluster's (%s)" % (cluster_group or "?")
    target = "TCP to %s" % (urlsplit(endpoint).netloc or endpoint or "the API server")
    if egress is None or isinstance(egress, str):
        why = ": %s" % egress if egress else ""
        return Check("warn", "network", "security group %s is %s; its outbound rules were not read%s: make sure they "
                     "allow %s" % (group, own, why, target))
    if egress.outcome == ALLOW:
        return Check("ok", "network", "security group %s (%s) allows %s: %s" % (group, own, target, egress.reason))
    if egress.outcome == DENY:
        host, port = _api_address(endpoint)
        return Check("PROBLEM", "network", "security group %s (%s) blocks %s: %s; the function cannot lift taints or "
                     "run rollouts until an outbound rule accepts it (ECS AuthorizeSecurityGroupEgress: IpProtocol "
                     "TCP, PortRange %s/%s, DestCidrIp %s/32, a Priority before the rule that drops it)" % (
                         group, own, target, egress.reason, port, port, host))
    return Check("warn", "network", "security group %s (%s): cannot tell whether it allows %s: %s" % (
        group, own, target, egress.reason))


def agent_checks(rows: List[Dict[str, Any]], node_names: Dict[str, str]) -> List[Check]:
    if not node_names:
        return [Check("warn", "agents", "no nodes in labelled pools yet: nothing to check")]
    by_id = {r.get("InstanceId"): r for r in rows}
    offline, old = [], []
    for iid in sorted(node_names):
        row = by_id.get(iid) or {}
        if str(row.get("CloudAssistantStatus", "")).lower() != "true":
            offline.append(node_names[iid] or iid)
            continue
        version = agent_version(row.get("CloudAssistantVersion"))
        if version is None or version < AGENT_MIN:
            old.append("%s (%s)" % (node_names[iid] or iid, row.get("CloudAssistantVersion") or "version unknown"))
    out = []
    if offline:
        out.append(Check("PROBLEM", "agents", "Cloud Assistant not running on %s: start the agent, or use the "
                                              "ssh transport" % ", ".join(offline)))
    if old:
        out.append(Check("warn", "agents", "Cloud Assistant older than %s on %s: update the agent"
                         % (".".join(map(str, AGENT_MIN)), ", ".join(old))))
    if not offline and not old:
        out.append(Check("ok", "agents", "Cloud Assistant online and >= %s on all %d nodes of labelled pools"
                         % (".".join(map(str, AGENT_MIN)), len(node_names))))
    return out


def _wanted_rules() -> List[Dict[str, Any]]:
    import yaml

    with open(RBAC_FILE, encoding="utf-8") as handle:
        for doc in yaml.safe_load_all(handle):
            if doc and doc.get("kind") == "ClusterRole":
                return doc.get("rules") or []
    return []


def _grants(rules: List[Dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in r.get("apiGroups", []) and (resource in r.get("resources", []) or "*" in r.get("resources", []))
               and (verb in r.get("verbs", []) or "*" in r.get("verbs", [])) for r in rules)


def rbac_checks(role: Optional[Dict[str, Any]], bindings: List[Dict[str, Any]]) -> List[Check]:
    if role is None:
        return [Check("PROBLEM", "rbac", "no ClusterRole %s: deploy with --parameter ClusterRbac=true (the "
                                         "default), or kubectl apply -f deploy/rbac.yaml" % ROLE_NAME)]
    have = role.get("rules") or []
    lacking = ["%s %s%s" % (verb, resource, "" if not group else "." + group)
               for rule in _wanted_rules() for group in rule.get("apiGroups", [""])
               for resource in rule.get("resources", []) for verb in rule.get("verbs", [])
               if not _grants(have, group, resource, verb)]
    out = [Check("PROBLEM" if lacking else "ok", "rbac", "ClusterRole %s lacks %s" % (ROLE_NAME, ", ".join(lacking))
                 if lacking else "ClusterRole %s has every rule of deploy/rbac.yaml" % ROLE_NAME)]
    bound = [b for b in bindings if (b.get("roleRef") or {}).get("name") == ROLE_NAME]
    subjects = ["%s %s" % (s.get("kind"), s.get("name")) for b in bound for s in b.get("subjects") or []]
    out.append(Check("ok" if subjects else "PROBLEM", "rbac", "bound to %s" % ", ".join(subjects) if subjects
                     else "ClusterRole %s is bound to nobody: bind it to the function's RAM role" % ROLE_NAME))
    return out


def events_checks(role: Optional[Dict[str, Any]], bindings: List[Dict[str, Any]]) -> List[Check]:
    """Events are a courtesy (a rollout works without them), so a missing grant is a warning: without it
    the function's Events (MigRolloutCordon, ...) are refused and ``kubectl describe node`` tells less."""
    fix = ("deploy with --parameter ClusterRbac=true (the default), or kubectl apply -f deploy/rbac.yaml; without "
           "it the function's Events are not written (rollouts still work)")
    bound = [b for b in bindings if (b.get("roleRef") or {}).get("name") == EVENTS_ROLE]
    if not bound:
        return [Check("warn", "rbac", "no RoleBinding in %s binds %s: %s" % (EVENTS_NAMESPACE, EVENTS_ROLE, fix))]
    if role is None or not _grants(role.get("rules") or [], "", "events", "create"):
        kind = (bound[0].get("roleRef") or {}).get("kind") or "Role"
        return [Check("warn", "rbac", "%s %s %s: %s" % (kind, EVENTS_ROLE, "does not exist" if role is None
                                                        else "grants no events create", fix))]
    subjects = ["%s %s" % (s.get("kind"), s.get("name")) for b in bound for s in b.get("subjects") or []]
    return [Check("ok", "rbac", "events create in %s through %s, bound to %s"
                  % (EVENTS_NAMESPACE, EVENTS_ROLE, ", ".join(subjects) or "nobody"))]


def _pod_args(pod: Dict[str, Any]) -> List[str]:
    out = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        out += [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        out += ["--mig-strategy=%s" % e.get("value") for e in c.get("env") or [] if e.get("name") == "MIG_STRATEGY"]
    return out


def cluster_checks(nodes: List[Dict[str, Any]], pods: List[Dict[str, Any]]) -> List[Check]:
    plugins = [p for p in pods if (p.get("metadata") or {}).get("name", "").startswith("nvidia-device-plugin")]
    out = []
    if not plugins:
        out.append(Check("warn", "device plugin", "no nvidia-device-plugin pod in kube-system (no GPU node yet?)"))
    else:
        mixed = [p for p in plugins if any(a in ("--mig-strategy=mixed",) for a in _pod_args(p))]
        others = sorted(p["metadata"]["name"] for p in plugins if p not in mixed)
        out.append(Check("ok" if not others else "PROBLEM", "device plugin",
                         "--mig-strategy=mixed on all %d pods" % len(plugins) if not others else
                         "not --mig-strategy=mixed on %s: nvidia.com/mig-<profile> resources will not show"
                         % ", ".join(others)))
    managed = sorted(n["metadata"]["name"] for n in nodes if MIG_MANAGER_LABEL in (n["metadata"].get("labels") or {}))
    manager_pods = [p for p in pods if "mig-manager" in (p.get("metadata") or {}).get("name", "")]
    if managed or manager_pods:
        out.append(Check("warn", "mig-manager", "NVIDIA mig-manager is present (%d nodes labelled %s): the hook "
                                                "refuses those nodes as conflict; see docs/operations.md"
                         % (len(managed), MIG_MANAGER_LABEL)))
    else:
        out.append(Check("ok", "mig-manager", "absent: the hook alone partitions GPUs"))
    return out


# ---- gathering (the only part that talks to the cloud) ----

def _gather(args) -> List[Check]:
    from functions.cloud.cs_lookup import CsLookup
    from functions.commands.stack import cluster_network
    from functions.commands.stack.ros import Stacks

    keys = common.keys(args)
    checks = [Check("ok", "credentials", "access key %s****" % keys.access_key_id[:6])]
    config = settings.load_settings(common.environment_with(keys, args.region))
    common.reach_cloud(config)
    cs = CsLookup(config)
    pools = cs.nodepools(args.cluster_id)
    checks += pool_checks(args.cluster_id, pools)
    checks += autoscaler_checks(pools, config.autoscaler_tags)
    stacks = Stacks(args.region, keys, settings.parse_endpoint(settings.environment(), settings.ROS_ENDPOINT))
    stack = common.find_stack(stacks, args)
    detail = stacks.get(stack["StackId"]) if stack else None
    resources = stacks.resources(stack["StackId"]) if stack else []
    checks += stack_checks(detail, resources, args.stack_name, args.cluster_id or "")
    params = common.stack_parameters(detail)
    try:
        network = cluster_network.read(keys, args.region, args.cluster_id, config.cs_endpoint)
        checks += network_checks(network, params, detail is not None,
                                 _egress(config, params.get("SecurityGroupId", ""), network.intranet_endpoint,
                                         params.get("VSwitchId", "")))
    except cluster_network.ClusterUnreadable as exc:  # the other checks still say what they found
        checks.append(Check("PROBLEM", "network", "cannot read the cluster's network (%s); doctor needs "
                            "cs:DescribeClusterDetail on the cluster" % exc))
    from functions.base.errors import Refused
    from functions.cloud.cluster import pool_refusal
    from functions.commands.stack.exit_codes import EXIT_FAILED, exit_code_for
    from functions.decision.decide import has_partition_label

    names: Dict[str, str] = {}
    refused: List[Check] = []
    for pool in pools:
        if not has_partition_label(pool):
            continue
        try:
            nodes = cs.nodes(args.cluster_id, pool.nodepool_id)
        except Refused as exc:
            if exit_code_for(exc.code, EXIT_FAILED) != EXIT_FAILED:
                # refused credentials or a missing RAM permission: every pool's list alike, and every command
                # ends on it with its exit code (4, 5) and hint before any check, as on any other call
                raise
            # about this pool alone (deleted while the cluster still lists it): the function fails that pool
            # alone at every run (functions/cloud/cluster.py pool_nodes), so doctor says so and checks the rest
            refused.append(Check("PROBLEM", "agents", "%s: its nodes' Cloud Assistant not checked, and the function "
                                                      "decides none of them; is the pool deleted or being deleted?"
                                 % pool_refusal(pool.nodepool_id, exc)))
            continue
        names.update({n.instance_id: n.node_name or "" for n in nodes})
    if names or not refused:  # "no nodes in labelled pools yet" would be wrong when a pool's nodes were not read
        checks += _agents(config, names)
    checks += refused
    from functions.decision.layout import LAYOUT_LABEL

    auto = sorted(p.nodepool_id for p in pools if LAYOUT_LABEL in p.labels)
    checks += _kube_checks(args, config, auto, detail is not None, resources,
                           params.get("ReconcileSchedule", "") if detail is not None else "")
    return checks


def rpc_client(product: str, version: str, config, endpoint) -> Any:
    """doctor's client of an RPC API (ECS, VPC): one try, bounded as a whole by ACK_MIG_CONNECT_TIMEOUT_S
    (``settings.connect_timeout_s``, the name lookup included: the attempt's guard). The function's client
    tries 5 times with back-offs, ~17 s against a name server that never answers, before one check's line; an
    operator's doctor says what it could not read in seconds and goes on to the next check."""
    from functions.base import settings
    from functions.cloud.rpc import Backoff, RpcClient

    return RpcClient(product, version, config.region, config.credentials, endpoint,
                     timeout_s=settings.connect_timeout_s(), backoff=Backoff(attempts=1))


def _vswitch_cidr(config, vswitch: str) -> Tuple[str, str]:
    """The function's vSwitch's IPv4 CIDR block (VPC DescribeVSwitchAttributes), or "" and why not: a rule
    limited to source addresses is matched against it (functions/commands/stack/egress.py)."""
    from functions.base import settings
    from functions.cloud.rpc import VPC_VERSION, ApiError

    if not vswitch:
        return "", "the stack names no vSwitch"
    endpoint = settings.parse_endpoint(settings.environment(), settings.VPC_ENDPOINT)
    try:
        body = rpc_client("vpc", VPC_VERSION, config, endpoint).call(
            "DescribeVSwitchAttributes", {"RegionId": config.region, "VSwitchId": vswitch})
    except ApiError as exc:
        return "", "vSwitch %s not read: %s (doctor needs vpc:DescribeVSwitchAttributes)" % (vswitch, exc.code)
    cidr = str(body.get("CidrBlock") or "")
    if body.get("VSwitchId") != vswitch or not cidr:
        # What the API answers for an id it does not hold is not documented: an answer that does not name the
        # vSwitch, or names no block, is taken as "not found", never as a block.
        return "", "VPC lists no vSwitch %s in %s" % (vswitch, config.region)
    return cidr, ""


def _egress(config, group: str, endpoint: str, vswitch: str = "") -> Any:
    """The group's verdict on TCP to the endpoint (the vSwitch's CIDR read for rules limited by source), the
    text of why it could not be read, or None."""
    from functions.cloud.rpc import ECS_VERSION, ApiError
    from functions.commands.stack.egress import UNKNOWN, Verdict, egress_verdict

    host, port = _api_address(endpoint)
    if not group or not host:
        return None
    client = rpc_client("ecs", ECS_VERSION, config, config.delivery.ecs_endpoint)
    try:
        found = client.call("DescribeSecurityGroups", {"RegionId": config.region, "SecurityGroupId": group})
        rows = (found.get("SecurityGroups") or {}).get("SecurityGroup") or []
        if not rows:
            return "ECS lists no security group %s in %s" % (group, config.region)
        rules: List[Dict[str, Any]] = []
        token = ""
        for _ in range(RULE_PAGES):
            params = {"RegionId": config.region, "SecurityGroupId": group, "Direction": "egress",
                      "MaxResults": RULE_PAGE}
            if token:
                params["NextToken"] = token
            page = client.call("DescribeSecurityGroupAttribute", params)
            rules += (page.get("Permissions") or {}).get("Permission") or []
            token = page.get("NextToken") or ""
            if not token:
                break
        else:  # never judged on part of the rules: a later page could hold the deciding one
            return "more than %d outbound rules listed" % (RULE_PAGE * RULE_PAGES)
    except ApiError as exc:
        return "%s (doctor needs ecs:DescribeSecurityGroups and ecs:DescribeSecurityGroupAttribute)" % exc.code
    cidr, why = _vswitch_cidr(config, vswitch)
    verdict = egress_verdict(str(rows[0].get("SecurityGroupType") or "normal"), rules, host, port, cidr)
    if verdict.outcome == UNKNOWN and why:
        return Verdict(UNKNOWN, "%s (%s)" % (verdict.reason, why))
    return verdict


def _agents(config, names: Dict[str, str]) -> List[Check]:
    """The agents' checks; Cloud Assistant's status that could not be read (no answer, a refusal) is that
    check's one line, and the other checks still say what they found."""
    from functions.cloud.rpc import ApiError

    try:
        rows = _agent_rows(config, sorted(names))
    except ApiError as exc:
        from functions.base.textsafe import clip  # inside the line's parentheses: cut where it reads whole

        return [Check("PROBLEM", "agents", "the nodes' Cloud Assistant status not read (%s); doctor needs "
                                           "ecs:DescribeCloudAssistantStatus" % clip(exc, 200))]
    return agent_checks(rows, names)


def _agent_rows(config, instance_ids: List[str]) -> List[Dict[str, Any]]:
    from functions.cloud.rpc import ECS_VERSION

    client = rpc_client("ecs", ECS_VERSION, config, config.delivery.ecs_endpoint)
    rows: List[Dict[str, Any]] = []
    for start in range(0, len(instance_ids), RUN_BATCH):  # the request the transport sends (cloud_assistant.py)
        batch = instance_ids[start:start + RUN_BATCH]
        params: Dict[str, Any] = {"RegionId": config.region}  # with InstanceId no paging parameter applies
        params.update({"InstanceId.%d" % (i + 1): iid for i, iid in enumerate(batch)})
        body = client.call("DescribeCloudAssistantStatus", params)
        rows += ((body.get("InstanceCloudAssistantStatusSet") or {}).get("InstanceCloudAssistantStatus") or [])
    return rows


def _node_facts(node: Dict[str, Any]) -> Dict[str, Any]:
    """What cluster_checks reads of a Node (a page of 500 realistic Nodes is ~9 MB; this is bytes); parts of
    another shape read as absent."""
    meta = as_object(as_object(node).get("metadata"))
    return {"metadata": {"name": str(meta.get("name") or "")[:253],
                         "labels": {k: str(v)[:63] for k, v in as_object(meta.get("labels")).items()
                                    if k == MIG_MANAGER_LABEL}}}


def _safe_args(words: List[Any]) -> List[str]:
    """A container's command or args as doctor keeps them: a kube-eventer sink is only its kind (a sink URI
    may carry an access key and secret), everything else as it is."""
    out = []
    for word in words:
        word = str(word)
        if word.startswith("--sink="):
            word = "--sink=" + word[len("--sink="):].split(":", 1)[0].split("?", 1)[0][:32]
        out.append(word)
    return out


def _pod_facts(pod: Dict[str, Any]) -> Dict[str, Any]:
    containers = [{"command": _safe_args(as_list(c.get("command"))), "args": _safe_args(as_list(c.get("args"))),
                   "env": [e for e in objects(c.get("env")) if e.get("name") == "MIG_STRATEGY"]}
                  for c in objects(as_object(as_object(pod).get("spec")).get("containers"))]
    return {"metadata": {"name": str(as_object(as_object(pod).get("metadata")).get("name") or "")[:253]},
            "spec": {"containers": containers}}


KUBE_AREAS = ("rbac", "device plugin", "mig-manager", "last run")  # what _kube_checks reports from the cluster's API


def _markers(client, auto_pools: List[str], unread: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Each auto pool's plan marker (functions/decision/coalesce.py), read only; a pool without one yet has an
    empty marker. None for a pool whose Lease could not be read (the check line is left out). ``unread``: gets,
    for each pool whose marker's note of a claim waited out (or the marker) does not read, why."""
    from node_bootstrap.kube import KubeError

    from functions.decision import coalesce as co
    from functions.rollout.plan_marker import marker_lease

    out: Dict[str, Any] = {}
    for pool, text in _annotations(client, auto_pools, marker_lease, co.MARKER_ANNOTATION).items():
        if text is _UNREAD:
            out[pool] = None
            continue
        out[pool] = co.read_marker(text, _now(client), 1e9)
        problem = co.waited_problem(text if isinstance(text, str) else None)
        if problem and unread is not None:
            unread[pool] = problem
    return out


def _claims(client, auto_pools: List[str]) -> Dict[str, Optional[Tuple[str, float]]]:
    """Each auto pool's planning claim (functions/decision/claim_rules.py) as pod events read it: (owner,
    end), ("", 0.0) for none; None for a pool whose Lease could not be read. A claim that does not read, or
    ends further ahead than one invocation's time by the default settings, counts as the events count it
    (claim_rules.read_claim and bound_claim: held, to one invocation's time from now)."""
    from functions.base.settings import load_settings
    from functions.decision import claim_rules as pc
    from functions.decision.budget import lease_name
    from functions.rollout.plan_claim import horizon_s

    out: Dict[str, Optional[Tuple[str, float]]] = {}
    horizon, now = horizon_s(load_settings({})), _now(client)
    for pool, text in _annotations(client, auto_pools, lease_name, pc.PLANNING_ANNOTATION).items():
        if text is _UNREAD:
            out[pool] = None
            continue
        claim = pc.bound_claim(pc.read_claim(text if isinstance(text, str) else None), now, horizon)
        out[pool] = (claim.owner, claim.expires) if claim is not None else ("", 0.0)
    return out


_UNREAD = object()  # a Lease that could not be read (_annotations)


def _annotations(client, pools: List[str], name_of: Any, key: str) -> Dict[str, Any]:
    """Per pool, annotation ``key`` of its Lease ``name_of(pool)`` in the events namespace as stored (None
    where the Lease or the annotation is missing; :data:`_UNREAD` where the Lease could not be read)."""
    from node_bootstrap.kube import KubeError

    out: Dict[str, Any] = {}
    for pool in pools:
        try:
            lease = _get(client, "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s" % (EVENTS_NAMESPACE,
                                                                                          name_of(pool)))
        except KubeError:
            out[pool] = _UNREAD
            continue
        out[pool] = (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(key)
    return out


def _now(client) -> float:
    from functions.kube.leases import cluster_now

    return cluster_now(client)


def _kube_checks(args, config, auto_pools: List[str] = (), stack_found: bool = False,
                 resources: List[Dict[str, Any]] = (), schedule: str = "") -> List[Check]:
    from node_bootstrap.kube import KubeError

    from functions.base.textsafe import clip  # a cause cut where it reads whole, never "...instead (the "
    from functions.kube.client import ClusterCredential, KubeApi

    try:
        if args.kubeconfig:
            client = KubeApi.from_file(args.kubeconfig)
        else:
            from functions.cloud.cs_lookup import CsLookup

            def ack_kubeconfig() -> str:
                return CsLookup(config).user_kubeconfig(args.cluster_id, private=False)

            client = ClusterCredential(ack_kubeconfig).client()
        common.one_deadline(client)
        role = _get(client, "/apis/rbac.authorization.k8s.io/v1/clusterroles/" + ROLE_NAME)
        bindings = client.list_all("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings") if role is not None \
            else []
        try:
            events = events_checks(*_events_grant(client))
        except KubeError as exc:  # a credential that may not read RBAC in default: say so, check the rest
            events = [Check("warn", "rbac", "events grant in %s not checked: %s"
                            % (EVENTS_NAMESPACE, clip(str(exc).splitlines()[0], 160)))]
        nodes = client.list_all("/api/v1/nodes", reduce=_node_facts)
        pods = client.list_all("/api/v1/namespaces/kube-system/pods", reduce=_pod_facts)
        unread: Dict[str, str] = {}
        markers = _markers(client, list(auto_pools), unread)
        claims = _claims(client, list(auto_pools))
        from functions.kube.last_run import read as read_record

        last_run = read_record(client)
    except KubeError as exc:
        # Once: the cause names the server (host:port); the areas it stopped are listed, not left out.
        return [Check("PROBLEM", "kubernetes", "cannot read the cluster's API: %s" % clip(str(exc).splitlines()[0],
                                                                                           200))] \
            + [Check("warn", area, "not checked: the cluster's API could not be read (above)") for area in KUBE_AREAS]
    return (rbac_checks(role, bindings) + events + cluster_checks(nodes, pods)
            + pod_event_checks(list(auto_pools), stack_found, list(resources), pods, markers, _now(client),
                               unread, claims)
            + last_run_checks(last_run, schedule))


def _events_grant(client) -> "tuple":
    """The RoleBindings in default that bind ack-mig-hook-events, and the Role or ClusterRole they name."""
    local = "%s/namespaces/%s" % (RBAC_API, EVENTS_NAMESPACE)
    bindings = [b for b in (_get(client, local + "/rolebindings") or {}).get("items") or []
                if (b.get("roleRef") or {}).get("name") == EVENTS_ROLE]
    if not bindings:
        return None, []
    kind = (bindings[0].get("roleRef") or {}).get("kind")
    path = ("%s/clusterroles/%s" % (RBAC_API, EVENTS_ROLE) if kind == "ClusterRole"
            else "%s/roles/%s" % (local, EVENTS_ROLE))
    return _get(client, path), bindings


def _get(client, path: str) -> Optional[Dict[str, Any]]:
    from node_bootstrap.kube.client import KubeError

    try:
        return client.get(path)
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


def run(args) -> int:
    common.require(args, "cluster_id", "region")
    checks = _gather(args)
    problems = sum(c.status == "PROBLEM" for c in checks)
    warnings = sum(c.status == "warn" for c in checks)
    if args.json:
        print(json.dumps({"cluster_id": args.cluster_id, "region": args.region,
                          "checks": [c._asdict() for c in checks], "problems": problems}, indent=2))
    else:
        from functions.base.textsafe import escape

        print("ack-mig-hook doctor: cluster %s in %s" % (escape(args.cluster_id), escape(args.region)))
        for c in checks:  # a check's text quotes what the cloud and the cluster answered: no terminal escapes
            print("%-8s %-22s %s" % (c.status, c.area, escape(c.text)))
        print("%d ok, %d warnings, %d problems" % (len(checks) - problems - warnings, warnings, problems))
    return 1 if problems else 0
