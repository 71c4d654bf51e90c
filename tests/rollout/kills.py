"""What the rollout kill matrices share (tests/rollout/*_kills.py, test_record_refused.py, test_interrupted.py's
TLS kill points and its auto matrix): each kill point
starts from the same emptied world, and a run is one invocation with every write through
tests/rollout/test_interrupted.py's Killer. One copy here, so a matrix's world and run cannot drift from the
others' by an edit made to one of them only."""

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from tests.rollout.test_interrupted import Killed, Killer


def cleared(cluster, seen=True):
    """The test API server emptied (nodes, pods, Events, Leases) and the clock back at 1000 s; with ``seen``
    the played node's applies forgotten too (a matrix that counts applies per point). The clock matters: the
    killed run then replays the probe run from the same time, so its k-th write is the probe's (a world emptied
    by hand left the clock where the probe ended, a drain's polls later, and only the runs not reading the
    time made the kill fall where the test meant it to)."""
    api = cluster.api
    with api.lock:
        for table in (api.nodes, api.pods, api.events, api.leases):
            table.clear()
    cluster.now[0] = 1000.0
    if seen:
        cluster.transport.seen.clear()


def timer_run(cluster, k=10 ** 6, transport=None, calls=None, **env):
    """One run of the timer's payload over the rollout snapshot (time for every wave: a day's invocation
    timeout), every write through a Killer that kills after the ``k``-th: (its writes, whether it was killed).
    ``transport`` is the node's (the cluster's played node unless given); ``calls`` a list the writes are
    kept in (a matrix that reads them after the kill); ``env`` more settings."""
    from functions.cloud.cluster import InventoryLookup
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.pipeline.event import run_event
    from tests.rollout.conftest import TIMER, snapshot

    killer = Killer(cluster.kube, cluster.transport if transport is None else transport, k, calls)
    settings = load_settings(dict(cluster.settings_env, ACK_MIG_INVOCATION_TIMEOUT_S="86400", **env))
    try:
        run_event(TIMER, settings, inventory=InventoryLookup.from_dict(snapshot()), logger=JsonLogger("OFF"),
                  kube=killer, executor=DeliveryExecutor.from_settings(settings, transport=killer))
    except Killed:
        return killer.calls, True
    return killer.calls, False
