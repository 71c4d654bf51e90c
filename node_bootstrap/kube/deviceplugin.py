"""Making the device plugin advertise the new MIG devices, and waiting until the node shows them.

Methods (``--device-plugin-restart``):

* ``manifest`` (default; ACK runs the plugin as a static pod): the plugin's manifest is one of the
  clients, moved away before the change and back after it, so the kubelet restarts it and it
  re-enumerates. Nothing more to do here.
* ``pod-delete`` (NVIDIA's DaemonSet): delete the plugin's pod on this node (``--device-plugin-selector``,
  ``--device-plugin-namespace``); the DaemonSet recreates it.
* ``none``: leave it (for instance at boot, before the kubelet runs).

Then the node's ``status.capacity`` must show ``nvidia.com/mig-<profile>`` with the planned counts.
"""

import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .client import KubeClient, KubeError, retry_delay
from ..outside import as_object, digits
from ..mig.resources import RESOURCE_PREFIX, resource_name  # noqa: F401  (RESOURCE_PREFIX: disable)

METHODS = ("manifest", "pod-delete", "none")


def expected_capacity(plans):
    # type: (Sequence[Any]) -> Dict[str, int]
    """The MIG resources the plans' layouts give (``plans``: commands.planner.GpuPlan, anything with a
    ``layout``; not imported: the Kubernetes side never imports the commands)."""
    counts = {}  # type: Dict[str, int]
    for plan in plans:
        for inst in plan.layout.instances:
            name = resource_name(inst.profile.name)
            counts[name] = counts.get(name, 0) + 1
    return counts


def restart_by_pod_delete(client, node_name, namespace, selector):
    # type: (KubeClient, str, str, str) -> List[str]
    deleted = []
    for pod in client.list_pods(namespace=namespace, node_name=node_name, label_selector=selector):
        meta = as_object(pod.get("metadata"))
        name, space = meta.get("name"), meta.get("namespace")
        if not isinstance(name, str) or not name:
            continue  # no pod to delete by that (the capacity wait then says the plugin did not publish)
        client.delete_pod(space if isinstance(space, str) and space else namespace, name)
        deleted.append(name)
    return deleted


def reported_capacity(node):
    # type: (dict) -> Dict[str, int]
    """The MIG resources in the Node's ``status.capacity``. The kubelet publishes a device count in a quantity's
    canonical form, ASCII digits below 1000; ``int`` would also take "\u0661" as 1 and "7_0" as 70, so a
    count is read by the shared rule (outside.digits) and any other value is left out."""
    capacity = as_object(as_object(as_object(node).get("status")).get("capacity"))
    out = {}
    for key, value in capacity.items():
        count = digits(value) if key.startswith(RESOURCE_PREFIX) else None
        if count is not None:
            out[key] = count
    return out


def poll_node(client, node_name, done, timeout, interval, sleep=time.sleep, clock=time.monotonic):
    # type: (KubeClient, str, Callable[[Optional[dict]], bool], float, float, Callable[[float], None], Callable[[], float]) -> Tuple[Optional[dict], Optional[str], bool]
    """Read the Node until ``done(node)`` holds or ``timeout`` seconds pass, the last read at the deadline.
    ``done`` is asked after every read with the last Node read, None while none was. Returns that Node, the
    last read's error (None when it went through) and whether ``done`` held.

    Reads come every ``interval``, or after the Retry-After of a read the API server turned away when that is
    longer (client.retry_delay): an API server under load (APF's 429) is never asked again sooner than it
    says. An ask past the deadline ends the poll at once, the error naming it: a read at the deadline would
    come before it, and a wait past the deadline is not this poll's to make. Monotonic time: a wall clock
    set back (NTP at boot) must not stretch the deadline."""
    deadline = clock() + timeout
    node = None  # type: Optional[dict]
    while True:
        delay, asked = interval, 0.0
        try:
            node = client.get_node(node_name)
            error = None  # type: Optional[str]
        except KubeError as exc:
            error = str(exc)
            delay, asked = retry_delay(exc, interval), retry_delay(exc, 0.0)
        if done(node):
            return node, None, True
        if asked and clock() + asked > deadline:
            return node, "%s (the server asks to retry after %gs: past the end of this %gs wait)" % (
                error, asked, timeout), False
        if clock() >= deadline:
            return node, error, False
        sleep(min(delay, max(deadline - clock(), 0.0)))


def wait_for_capacity(client, node_name, expected, timeout, interval=3.0, sleep=time.sleep, clock=time.monotonic):
    # type: (KubeClient, str, Dict[str, int], float, float, Callable[[float], None], Callable[[], float]) -> dict
    """Poll the Node (:func:`poll_node`) until every expected resource shows its count (or the timeout passes).
    ``error``: the last read's, when the wait ended without the counts and that read failed."""
    node, error, ready = poll_node(client, node_name, lambda n: all(
        reported_capacity(n or {}).get(k) == v for k, v in expected.items()), timeout, interval, sleep, clock)
    result = {"expected": expected, "reported": reported_capacity(node or {}), "ready": ready}  # type: Dict[str, Any]
    if error:
        result["error"] = error
    return result
