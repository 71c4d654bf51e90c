"""The auto pool beside the other ways of sharing MIG GPUs, on the same demand, the same no-eviction rule and
the same autoscaler (``bench/demand.py --peers``).

Every peer is modelled from its public description; what each source says and what is assumed:

* ``dra-first-fit``: Kubernetes DRA with partitionable devices (KEP-4815, kubernetes/enhancements #4815;
  beta and on by default in 1.36) and NVIDIA's DRA driver with its DynamicMIG gate (kubernetes-sigs/
  dra-driver-nvidia-gpu, formerly NVIDIA/k8s-dra-driver-gpu). The driver advertises every profile x placement
  of every GPU as a device consuming shared counters (memory slices), creates the instance when the pod's
  claim is prepared and destroys it when the claim is released. The allocator
  (kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/structured, allocator.go) takes
  the first device, in slice order, that satisfies the request and its counters: first fit, no scoring
  (a scoring KEP, kubernetes/enhancements #4970, has no timeline). Modelled: for each waiting pod in
  creation order, the first node (oldest first), its first GPU (index order) and that GPU's first free
  placement (lowest start) where the instance fits beside the ones there (no overlap, the catalogue's
  counting rules). Assumed in DRA's favour: kube-scheduler's node choice is the first feasible node
  (its default NodeResourcesFit scoring, LeastAllocated on CPU and memory, would spread pods instead).
* ``hami``: HAMi's dynamic MIG (Project-HAMi/HAMi docs/develop/mig-dynamic-deallocate.md, the current
  design; docs/develop/scheduler-policy.md): the scheduler reserves a physical GPU, a profile and a
  placement per pod before binding (a pod annotation), the device plugin creates exactly that instance
  at container allocation, and a reconciler destroys it when the pod is gone. Node choice by
  ``node-scheduler-policy`` and GPU choice by ``gpu-scheduler-policy``; here both ``binpack`` (score = the
  shares of instances, compute and memory in use; a GPU's with the request added), the setting a team
  minimising GPUs picks;
  the placement is the first free one in HAMi's order (``orderedMigPlacements`` in pkg/device/nvidia/
  mig_topology.go: 1g and 3g profiles from the highest start down, the others from the lowest up).
* ``static-pool``: the best static pool chosen with hindsight: the integer program over each profile's
  peak (``demand_bound``), its configurations laid out on ceil(GPUs / 8) nodes held for the whole run
  (no scale-out or -in: a static pool sized for its peak never needs one); pods bind to idle instances.
* ``ack-<sequence>``: ACK's four fixed sequences (7x1g, 3x2g+1g, 2x3g, 4g+3x1g) on every GPU of every
  node, autoscaled; a pod whose profile the sequence lacks is never served.
* ``auto``: this project's planner (``functions.decision.layout.plan``) once per step over the ready nodes
  and the waiting pods, its plan applied (``demand.Pool.apply``'s rules: destroying an in-use instance
  counts as an eviction), pods bound; its ``new_node_shape`` (per-GPU layouts of one node) is the node
  template the autoscaler counts on (the node-template tags advertise the whole node), and a node it adds
  boots as the hook boots one: the shape's first layout (``new_node``) on every GPU, the plan of the step
  it is ready repartitioning idle GPUs for the rest. The plan runs under the hook's dwell (``dwell.plan_steady``
  with the default ``ACK_MIG_AUTO_DWELL_S`` and ``ACK_MIG_AUTO_MAX_WAIT_S``): a GPU a plan changed is not
  repartitioned again within 10 minutes unless a pod has waited more than 5 (it binds on the trace's
  minutes; the synthetic days' half-hour steps are longer than the dwell).

The shared model (one for all, so node-hours compare):

* Time in steps (``step_h`` hours). A pod arrives at its step and waits; it leaves at its step whether it
  was served or not (a pod still waiting then is *never served*). Pods are taken in creation order.
* No evictions: an instance holding a pod is never destroyed or moved (``evicted`` counts violations).
* Binding to an existing instance (static, ACK, auto): the idle instance of the pod's profile on the GPU
  with the most compute in use (kube-scheduler's MostAllocated, as in ``demand._bind``).
* Autoscaler (cluster-autoscaler's model): after scheduling, the waiting pods are simulated, with the
  peer's own placement rule, on the nodes still booting (as the template they were added from) and then on
  fresh template nodes; the template
  nodes used are added and are ready ``boot_steps`` later. A peer without a template (static, or an auto
  plan naming no new-node layout) adds none. A ready node that held no pod at the end of ``idle_steps``
  steps in a row is removed (scale-down removes only empty nodes; no pod is ever moved to empty one).
  The autoscaler acts at the end of a step: a node costs from the next step on, booting included.
* Measured per step: GPUs holding a pod (GPU-hours, peak), nodes (node-hours, peak), and the lower bound:
  the integer program's fewest GPUs for the pods alive (``demand_bound.min_gpus``: every pod repacked
  afresh), and those GPUs rounded up to whole nodes (node-hours bound). Waits: per served pod, steps
  from arrival to binding (p50, p95, max, in minutes); never served: left waiting, or a profile the peer
  cannot offer.
"""

import functools
import math
from collections import Counter, defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

import _path  # noqa: F401

import demand_bound
import demand_noevict
from functions.base.settings import Settings
from functions.decision.layout import Bounds, GpuSupply, Instance, PodDemand, plan
from functions.decision.layout.dwell import Dwell, plan_steady
from node_bootstrap.mig.catalogue import GpuModel
from node_bootstrap.mig.solver import check_budget, try_place

GPUS_PER_NODE = 8
DWELL_S, MAX_WAIT_S = float(Settings.auto_dwell_s), float(Settings.auto_max_wait_s)  # ACK_MIG_AUTO_*: the defaults
Key = Tuple[str, int]  # (profile name, start)


class Pod:
    __slots__ = ("key", "profile", "arrive", "leave", "bound", "served_at")

    def __init__(self, key: str, profile: str, arrive: int, leave: int):
        self.key, self.profile, self.arrive, self.leave = key, profile, arrive, leave
        self.bound = None  # (node, gpu index, instance key) once served
        self.served_at = None


class Node:
    """One node: per GPU, its instances and who holds each ({(profile, start): pod key or None})."""

    __slots__ = ("name", "gpus", "ready_at", "idle", "advertised")

    def __init__(self, name: str, gpus: List[Dict[Key, Optional[str]]], ready_at: int,
                 advertised: Optional[List[Dict[Key, Optional[str]]]] = None):
        self.name, self.gpus, self.ready_at, self.idle = name, gpus, ready_at, 0
        # what the autoscaler counts on while the node boots (its template: the pool's tags), which is not
        # always the layout the node boots with: cluster-autoscaler simulates upcoming nodes as copies of the
        # node group's template (core/static_autoscaler.go, getUpcomingNodeInfos)
        self.advertised = advertised if advertised is not None else gpus

    def holds_pod(self) -> bool:
        return any(h is not None for g in self.gpus for h in g.values())


@functools.lru_cache(maxsize=4096)
def _fits_budget(gpu: GpuModel, names: Tuple[str, ...]) -> bool:
    return check_budget(gpu, [gpu.profile_by_name(n) for n in names]) is None


def first_free_start(gpu: GpuModel, inst: Dict[Key, Optional[str]], profile: str,
                     highest: bool = False) -> Optional[int]:
    """The lowest start (``highest``: the highest) where an instance of ``profile`` fits beside ``inst`` (no
    memory slot shared, the catalogue's counting rules kept), None when none does."""
    used = 0
    for (name, start) in inst:
        used |= ((1 << gpu.profile_by_name(name).memory_slices) - 1) << start
    if not _fits_budget(gpu, tuple(sorted([n for n, _ in inst] + [profile]))):
        return None
    for pl in sorted(gpu.profile_by_name(profile).placements, key=lambda p: p.start, reverse=highest):
        if not used & (((1 << pl.size) - 1) << pl.start):
            return pl.start
    return None


def _compute(gpu: GpuModel, inst: Dict[Key, Optional[str]], held_only: bool = True) -> int:
    return sum(gpu.profile_by_name(n).compute_slices for (n, _), h in inst.items() if h is not None or not held_only)


def _bind_idle(gpu: GpuModel, nodes: Sequence[Node], pod: Pod) -> bool:
    """The idle instance of the pod's profile on the GPU with the most compute in use; ties: first node,
    GPU, start (demand._bind's scheduler)."""
    best = None
    for node in nodes:
        for i, inst in enumerate(node.gpus):
            starts = [start for (name, start), holder in inst.items() if name == pod.profile and holder is None]
            # strictly more compute in use wins, so a tie keeps the first node and GPU; on the GPU, its lowest start
            if starts and (best is None or _compute(gpu, inst) > best[0]):
                best = (_compute(gpu, inst), node, i, (pod.profile, min(starts)))
    if best is None:
        return False
    _, node, i, key = best
    node.gpus[i][key] = pod.key
    pod.bound = (node.name, i, key)
    return True


class Peer:
    """A way of sharing: how a pod gets an instance, and what node the autoscaler adds."""

    name = ""
    dynamic = False  # instances exist only while a pod holds one (created at binding, destroyed at leave)

    def __init__(self, gpu: GpuModel):
        self.gpu = gpu

    def offers(self, profile: str) -> bool:
        return True

    def prepare(self, step: int, nodes: Sequence[Node], waiting: Sequence[Pod], stats: Counter) -> None:
        """Before scheduling (the auto pool plans here)."""

    def place(self, nodes: Sequence[Node], pod: Pod) -> bool:
        return _bind_idle(self.gpu, nodes, pod)

    def template(self) -> Optional[List[Dict[Key, Optional[str]]]]:
        """A fresh node's GPUs, or None: this peer adds no nodes."""
        return None

    def boot(self) -> Optional[List[Dict[Key, Optional[str]]]]:
        """The GPUs of a node the autoscaler added, once it is ready: its template unless said otherwise."""
        return self.template()

    def initial(self) -> List[List[Dict[Key, Optional[str]]]]:
        """Nodes there from the start, ready."""
        return []


class DraFirstFit(Peer):
    name = "dra-first-fit"
    dynamic = True

    def place(self, nodes, pod):
        for node in nodes:
            for i, inst in enumerate(node.gpus):
                start = first_free_start(self.gpu, inst, pod.profile)
                if start is not None:
                    inst[(pod.profile, start)] = pod.key
                    pod.bound = (node.name, i, (pod.profile, start))
                    return True
        return False

    def template(self):
        return [{} for _ in range(GPUS_PER_NODE)]


class Hami(DraFirstFit):
    name = "hami"

    def __init__(self, gpu):
        super().__init__(gpu)
        self._count = max(len(q.placements) for q in gpu.profiles)

    def _shares(self, inst: Dict[Key, Optional[str]]) -> Tuple[float, float, float]:
        """A GPU's usage as HAMi scores it: instances held over the GPU's count (a MIG GPU's largest
        InstanceCount: pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go), compute and memory held
        as shares of the GPU (the catalogue's slices for HAMi's Core and MemoryMB)."""
        gpu = self.gpu
        held = [gpu.profile_by_name(n) for (n, _), h in inst.items() if h is not None]
        return (len(held) / float(self._count), sum(q.compute_slices for q in held) / float(gpu.compute_slices),
                sum(q.memory_slices for q in held) / float(gpu.memory_slots))

    def place(self, nodes, pod):
        gpu, p = self.gpu, self.gpu.profile_by_name(pod.profile)
        # HAMi's selectMigPlacement (pkg/device/nvidia/mig_topology.go, orderedMigPlacements): a profile named
        # 1g.* or 3g.* takes its highest free start, the others their lowest (an A100's 3g at 4 leaves the 4g's
        # half free)
        highest = pod.profile.startswith(("1g.", "3g."))
        add = (1.0 / self._count, p.compute_slices / float(gpu.compute_slices),
               p.memory_slices / float(gpu.memory_slots))
        best = None
        for node in nodes:
            shares = [self._shares(inst) for inst in node.gpus]
            # binpack, the highest score first (default weights 1, 1, 1): the node by ComputeDefaultScore
            # (pkg/scheduler/policy/node_policy.go: its GPUs' instances, cores and memory in use, before the pod),
            # the GPU by ComputeScore (gpu_policy.go: the same three shares with the request added)
            node_score = sum(sum(x) for x in shares) / len(node.gpus)
            for i, inst in enumerate(node.gpus):
                start = first_free_start(gpu, inst, pod.profile, highest)
                if start is None:
                    continue
                gpu_score = sum(shares[i]) + sum(add)
                key = (-node_score, -gpu_score)
                if best is None or key < best[0]:
                    best = (key, node, i, start)
        if best is None:
            return False
        _, node, i, start = best
        node.gpus[i][(pod.profile, start)] = pod.key
        pod.bound = (node.name, i, (pod.profile, start))
        return True


def _laid_out(gpu: GpuModel, config: Sequence[Tuple[str, int]]) -> Dict[Key, Optional[str]]:
    layout = try_place(gpu, [gpu.profile_by_name(n) for n, k in config for _ in range(k)])
    assert layout is not None, config
    return {(i.profile.name, i.start): None for i in layout.instances}


class Fixed(Peer):
    """Every GPU of every node with one layout (ACK's sequences)."""

    def __init__(self, gpu, name: str, config):
        super().__init__(gpu)
        self.name, self.layout = name, _laid_out(gpu, config)

    def offers(self, profile):
        return any(n == profile for n, _ in self.layout)

    def template(self):
        return [dict(self.layout) for _ in range(GPUS_PER_NODE)]


class StaticPool(Peer):
    """The hindsight static pool: fixed GPUs, sized for every profile's peak."""

    name = "static-pool"

    def __init__(self, gpu, configs: Sequence[Sequence[Tuple[str, int]]]):
        super().__init__(gpu)
        gpus = [_laid_out(gpu, c) for c in configs]
        while len(gpus) % GPUS_PER_NODE:  # the last node's other GPUs: a copy of the first layout (free)
            gpus.append(dict(gpus[0]))
        self.nodes = [gpus[i:i + GPUS_PER_NODE] for i in range(0, len(gpus), GPUS_PER_NODE)]
        self.offered = {n for c in configs for n, _ in c}

    def offers(self, profile):
        return profile in self.offered

    def initial(self):
        return self.nodes


class AutoPool(Peer):
    name = "auto"

    def __init__(self, gpu, model_name: str, profiles, step_h: float):
        super().__init__(gpu)
        self.model_name = model_name
        self.bounds = Bounds(profiles=frozenset(profiles), model=model_name, node_gpus=GPUS_PER_NODE)
        self.previous = None
        self.new_node = ()
        # the dwell as the hook runs it (functions/decision/layout/dwell.py, the settings' defaults): a GPU a plan
        # changed is not repartitioned again for DWELL_S unless a pod has waited longer than MAX_WAIT_S. It only
        # binds where a step is shorter than the dwell (the trace's minutes, not the half-hour days).
        self.step_s = step_h * 3600.0
        self.changed: Dict[Tuple[str, int], float] = {}  # (node, GPU index) -> when a plan last changed it

    def prepare(self, step, nodes, waiting, stats):
        if not waiting:  # the timer's tick ends at "no unschedulable pod asks for MIG"
            self.new_node = ()
            return
        supply = [GpuSupply(n.name, i, self.model_name,
                            tuple(Instance(p, s, h is not None) for (p, s), h in sorted(inst.items())))
                  for n in nodes for i, inst in enumerate(n.gpus)]
        demand = [PodDemand(p.key, "pod " + p.key, p.profile) for p in waiting]
        now = step * self.step_s
        dwell = Dwell(self.changed, now, DWELL_S, MAX_WAIT_S, {p.key: now - p.arrive * self.step_s for p in waiting})
        result = plan_steady(plan, supply, demand, self.bounds, dwell, self.previous)
        self.previous = result
        for t in result.changes:  # what the hook marks on the pool's Lease (plan_claim.PlanClaims.mark)
            self.changed[(t.node, t.index)] = now
        by_name = {n.name: n for n in nodes}
        for t in result.changes:
            held = by_name[t.node].gpus[t.index]
            for key in t.destroy:
                if held.get(key) is not None:
                    stats["evicted"] += 1
                held.pop(key, None)
                stats["destroyed"] += 1
            for key in t.create:
                held[key] = None
                stats["created"] += 1
        self.new_node = result.new_node_shape

    def template(self):
        if not self.new_node:
            return None
        # the whole node the tags advertise (Plan.new_node_shape), GPU by GPU: what the autoscaler counts on
        return [{tuple(k): None for k in layout} for layout, n in self.new_node for _ in range(n)]

    def boot(self):
        # what the hook gives a fresh node: the layout most of its GPUs get (Plan.new_node, the shape's first)
        # on every GPU; the plan of the step it is ready repartitions idle GPUs for the others (docs/auto-pools.md
        # "New nodes")
        if not self.new_node:
            return None
        return [{tuple(k): None for k in self.new_node[0][0]} for _ in range(GPUS_PER_NODE)]


def peers(gpu: GpuModel, model_name: str, profiles: Sequence[str], peaks: Dict[str, int], step_h: float
          ) -> List[Peer]:
    out = [AutoPool(gpu, model_name, profiles, step_h), DraFirstFit(gpu), Hami(gpu)]
    configs = demand_bound.min_gpu_configs(gpu, peaks)
    if configs:
        out.append(StaticPool(gpu, configs))
    for label, config in demand_bound.ack_sequences(gpu):
        out.append(Fixed(gpu, "ack-" + label, config))
    return out


def _percentile(values: Sequence[float], q: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(math.ceil(q * len(ordered))) - 1)]


def simulate(peer: Peer, events, names: Dict[str, str], steps: int, step_h: float, boot_steps: int = 1,
             idle_steps: int = 1) -> dict:
    """One peer over the events (``demand_traces.PodEvent``: arrive and leave in steps, ``klass`` a slice
    class ``names`` maps to a profile). Pure: no I/O."""
    gpu = peer.gpu
    pods = [Pod(e.key, names[e.klass], e.arrive, max(e.leave, e.arrive + 1)) for e in events]
    arrivals, leaving = defaultdict(list), defaultdict(list)
    for p in pods:
        arrivals[p.arrive].append(p)
        leaving[p.leave].append(p)
    nodes: List[Node] = [Node("s%04d" % i, [dict(g) for g in gpus], 0) for i, gpus in enumerate(peer.initial())]
    made = len(nodes)
    waiting: List[Pod] = []
    stats = Counter()
    gpu_steps = node_steps = peak_gpus = peak_nodes = peak_waiting = 0
    booting_steps = empty_steps = 0  # where node-hours go beyond nodes holding pods
    share_steps = 0.0
    for step in range(steps):
        by_name = {n.name: n for n in nodes}
        for p in leaving[step]:
            if p.bound is not None:
                node, i, key = p.bound
                inst = by_name[node].gpus[i]
                if peer.dynamic:
                    del inst[key]
                else:
                    inst[key] = None
            elif p.served_at is None and p in waiting:
                waiting.remove(p)
                stats["left_waiting"] += 1
        for p in arrivals[step]:
            if peer.offers(p.profile):
                waiting.append(p)
            else:
                stats["unservable"] += 1
        ready = [n for n in nodes if n.ready_at <= step]
        peer.prepare(step, ready, waiting, stats)
        still = []
        for p in waiting:
            if peer.place(ready, p):
                p.served_at = step
            else:
                still.append(p)
        waiting = still
        held = [_compute(gpu, inst) for n in ready for inst in n.gpus]  # compute slices pods hold, per GPU
        busy = sum(1 for c in held if c)
        # the instances pods hold, as shares of a GPU (compute slices / 7): what the GPUs in use are for
        share_steps += sum(held) / float(gpu.compute_slices)
        gpu_steps += busy
        node_steps += len(nodes)
        booting_steps += sum(1 for n in nodes if n.ready_at > step)
        empty_steps += sum(1 for n in ready if not n.holds_pod())
        peak_gpus, peak_nodes = max(peak_gpus, busy), max(peak_nodes, len(nodes))
        peak_waiting = max(peak_waiting, len(waiting))
        # the autoscaler: the waiting pods on the booting nodes, then on fresh template nodes
        if waiting and peer.template() is not None:
            trial = [Node(n.name, [dict(g) for g in n.advertised], n.ready_at) for n in nodes if n.ready_at > step]
            added = 0
            for p in waiting:
                saved = p.bound
                if peer.place(trial, p):
                    p.bound = saved
                    continue
                fresh = Node("new", peer.template(), 0)
                if peer.place([fresh], p):
                    p.bound = saved
                    trial.append(fresh)
                    added += 1
            for _ in range(added):
                nodes.append(Node("n%05d" % made, peer.boot(), step + boot_steps, peer.template()))
                made += 1
            stats["scale_outs"] += 1 if added else 0
        kept = []
        for n in nodes:
            if n.ready_at <= step and not n.holds_pod():
                n.idle += 1
                if n.idle >= idle_steps and not isinstance(peer, StaticPool):
                    continue
            else:
                n.idle = 0
            kept.append(n)
        nodes = kept
    stats["left_waiting"] += len(waiting)  # the run ended with them waiting
    served = [p for p in pods if p.served_at is not None]
    waits = [(p.served_at - p.arrive) * step_h * 60 for p in served]
    return {
        "peer": peer.name, "gpu_hours": round(gpu_steps * step_h, 1), "node_hours": round(node_steps * step_h, 1),
        "booting_node_hours": round(booting_steps * step_h, 1), "empty_node_hours": round(empty_steps * step_h, 1),
        # GPU-hours per GPU-hour of instances served (1.00: every GPU in use full): GPU-hours count served pods
        # only, so this is the figure that compares peers that serve different numbers of pods
        "served_share_hours": round(share_steps * step_h, 1),
        "gpu_hours_per_served": round(gpu_steps / share_steps, 3) if share_steps else None,
        "peak_gpus": peak_gpus, "peak_nodes": peak_nodes, "peak_waiting": peak_waiting,
        "served": len(served), "waited": sum(1 for w in waits if w > 0),
        "wait_p50_min": _percentile(waits, 0.5), "wait_p95_min": _percentile(waits, 0.95),
        "wait_max_min": max(waits) if waits else None,
        "never_served": stats["left_waiting"] + stats["unservable"], "unservable": stats["unservable"],
        "evicted": stats["evicted"], "scale_outs": stats["scale_outs"],
    }


def lower_bound(gpu: GpuModel, events, names: Dict[str, str], steps: int, step_h: float) -> dict:
    """Per step the integer program's fewest GPUs for the pods alive, and that rounded up to whole nodes."""
    delta = defaultdict(Counter)
    for e in events:
        delta[e.arrive][names[e.klass]] += 1
        delta[max(e.leave, e.arrive + 1)][names[e.klass]] -= 1
    alive, gpus, nodes, peak, proven = Counter(), 0, 0, 0, True
    for step in range(steps):
        alive.update(delta.get(step, {}))
        value, ok = demand_bound.min_gpus(gpu, alive)
        proven = proven and ok
        value = int(value or 0)
        gpus += value
        nodes += -(-value // GPUS_PER_NODE)
        peak = max(peak, value)
    return {"gpu_hours": round(gpus * step_h, 1), "node_hours": round(nodes * step_h, 1), "peak_gpus": peak,
            "proven": proven}


def compare(gpu: GpuModel, model_name: str, events, names: Dict[str, str], steps: int, step_h: float,
            boot_steps: int = 1, idle_steps: int = 1, no_eviction_s: float = 0.0) -> dict:
    """Every peer over the same events, the bound, and the two goals. ``no_eviction_s`` > 0: also the
    node-hours bound for any peer that never moves a pod (``demand_noevict``), HiGHS given that long."""
    peaks, alive = Counter(), Counter()
    delta = defaultdict(Counter)
    for e in events:
        delta[e.arrive][names[e.klass]] += 1
        delta[max(e.leave, e.arrive + 1)][names[e.klass]] -= 1
    for step in range(steps):
        alive.update(delta.get(step, {}))
        for n, k in alive.items():
            peaks[n] = max(peaks[n], k)
    profiles = sorted(n for n, k in peaks.items() if k > 0)
    rows = [simulate(p, events, names, steps, step_h, boot_steps, idle_steps)
            for p in peers(gpu, model_name, profiles, dict(peaks), step_h)]
    bound = lower_bound(gpu, events, names, steps, step_h)
    auto = rows[0]
    others = rows[1:]
    kept = None
    if no_eviction_s > 0:
        # at most as many nodes at once as the busiest peer had, plus two (each node index may go and come
        # back, so this limits only how many exist together)
        kept = demand_noevict.node_hours(gpu, events, names, steps, step_h,
                                         max(r["peak_nodes"] for r in rows) + 2, no_eviction_s)
    return {
        "pods": len(events), "steps": steps, "step_h": step_h, "boot_steps": boot_steps, "idle_steps": idle_steps,
        "peers": rows, "bound": bound,
        "auto_fewest_gpu_hours": all(auto["gpu_hours"] < r["gpu_hours"] for r in others),
        # against the peers that offer every profile of the demand (ACK's sequences do not: a pod never
        # served costs no GPU-hour, so they look cheap by serving less)
        "auto_fewest_gpu_hours_full_peers": all(auto["gpu_hours"] < r["gpu_hours"] for r in others
                                                if r["unservable"] == 0),
        "auto_node_hours_over_bound_pct": round(100.0 * (auto["node_hours"] - bound["node_hours"])
                                                / bound["node_hours"], 1) if bound["node_hours"] else None,
        # GPU-hours per GPU-hour of instances served: the same comparison with what each peer served taken out
        # (strictly fewer, as the GPU-hours goals: a tie is no win)
        "auto_fewest_gpu_hours_per_served": all(auto["gpu_hours_per_served"] < r["gpu_hours_per_served"]
                                                for r in others if r["gpu_hours_per_served"] is not None),
        "no_eviction_bound": kept,
        "auto_node_hours_over_no_eviction_pct": round(100.0 * (auto["node_hours"] - kept["node_hours"])
                                                      / kept["node_hours"], 1) if kept and kept["node_hours"] else None,
        "repack_bound_below_no_eviction_pct": round(100.0 * (kept["node_hours"] - bound["node_hours"])
                                                    / bound["node_hours"], 1) if kept and bound["node_hours"] else None,
    }
