"""The function's Kubernetes client (functions/kube/client.py) against the TLS test API server: retries that
are bounded and honour Retry-After, budgets told from throttling, kept-alive connections, paging."""

import pytest

from functions.kube.client import ApiError, KubeApi
from node_bootstrap.kube import load_kubeconfig
from tests.support.kubeapi import CertificateAuthority


@pytest.fixture
def config(kube_api, tmp_path):
    return load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "a.conf", cert=kube_api.admin_cert()))


def client(config, **options):
    sleeps = []
    options.setdefault("sleep", sleeps.append)
    options.setdefault("jitter", lambda: 1.0)  # the backoff's upper bound: predictable waits
    return KubeApi(config, **options), sleeps


def test_5xx_and_dropped_connections_are_retried_with_growing_backoff(kube_api, config):
    kube_api.add_node("node-a")
    kube_api.break_next(times=2, status=503, method="GET")
    kube_api.break_next(times=1, status=None, method="GET")  # the connection closes unanswered
    api, sleeps = client(config)
    assert api.get_node("node-a")["metadata"]["name"] == "node-a"
    assert [r.status for r in kube_api.requests] == [503, 503, 0, 200]
    assert sleeps == [0.25, 0.5, 1.0] and api.retried == 3


def test_retries_are_bounded(kube_api, config):
    kube_api.add_node("node-a")
    kube_api.fail["PATCH"] = 503
    api, sleeps = client(config, attempts=3)
    with pytest.raises(ApiError) as err:
        api.patch_node("node-a", {"metadata": {"labels": {"x": "1"}}})
    assert err.value.status == 503 and "HTTP 503" in str(err.value)
    assert len([r for r in kube_api.requests if r.method == "PATCH"]) == 3 and len(sleeps) == 2


def test_throttling_waits_at_least_what_retry_after_asks(kube_api, config):
    kube_api.add_node("node-a")
    kube_api.throttle(times=2, retry_after=3, method="GET")
    api, sleeps = client(config)
    api.get_node("node-a")
    assert sleeps == [3.0, 3.0]  # Retry-After wins over the shorter backoff


@pytest.mark.parametrize("value", ["9" * 19, "9" * 400, "30"], ids=len)
def test_a_retry_after_of_many_digits_is_the_longest_wait_as_notifys(value):
    """The one rule for ``Retry-After`` (``outside.delay_seconds``, notify's too): delay-seconds of any length
    are a wait, capped here at RETRY_AFTER_MAX_S; anything but ASCII digits is none (the backoff)."""
    from functions.kube.client import RETRY_AFTER_MAX_S, _retry_after

    assert _retry_after({"Retry-After": value}) == RETRY_AFTER_MAX_S
    for odd in ("inf", "1e400", "+3", "\u0663", "Wed, 21 Oct 2015 07:28:00 GMT", ""):
        assert _retry_after({"Retry-After": odd}) is None, odd


def test_no_retry_past_the_invocations_deadline(kube_api, config):
    kube_api.add_node("node-a")
    kube_api.throttle(times=5, retry_after=20, method="GET")
    now = [0.0]
    api, sleeps = client(config, deadline_s=10.0, clock=lambda: now[0])
    with pytest.raises(ApiError) as err:
        api.get_node("node-a")
    assert err.value.throttled and sleeps == [] and len(kube_api.requests) == 1


def test_a_budget_refusal_is_not_retried_and_is_told_from_throttling(kube_api, config):
    kube_api.add_pod("team", "p", "node-a", labels={"app": "x"}, owner_kind="ReplicaSet")
    kube_api.add_pdb("team", "b", {"app": "x"}, min_available=1)
    api, sleeps = client(config)
    with pytest.raises(ApiError) as err:
        api.evict("team", "p")
    assert err.value.budget and not err.value.throttled and sleeps == []
    kube_api.pdbs.clear()
    kube_api.throttle(times=1, retry_after=1, method="POST")  # API Priority and Fairness: tried again
    api.evict("team", "p")
    assert [r.status for r in kube_api.requests] == [429, 429, 201] and sleeps == [1.0]


def test_an_eviction_500_for_several_budgets_is_final(kube_api, config):
    kube_api.add_pod("team", "p", "node-a", labels={"app": "x"}, owner_kind="ReplicaSet")
    kube_api.add_pdb("team", "b1", {"app": "x"}, min_available=0)
    kube_api.add_pdb("team", "b2", {"app": "x"}, min_available=0)
    api, sleeps = client(config)
    with pytest.raises(ApiError) as err:
        api.evict("team", "p")
    assert err.value.status == 500 and sleeps == [] and len(kube_api.requests) == 1


def test_a_ca_that_does_not_match_is_not_retried(kube_api, tmp_path):
    path = kube_api.write_kubeconfig(tmp_path / "k.conf", cert=kube_api.admin_cert(), inline=True)
    text = open(path).read()
    import base64

    other = base64.b64encode(CertificateAuthority("someone-else").pem).decode()
    open(path, "w").write(text.replace(base64.b64encode(kube_api.ca.pem).decode(), other))
    api, sleeps = client(load_kubeconfig(path))
    with pytest.raises(ApiError) as err:
        api.get("/api/v1/nodes")
    assert err.value.status is None and "TLS" in str(err.value) and sleeps == []


def test_calls_share_one_kept_alive_connection(kube_api, config):
    kube_api.add_node("node-a")
    api, _ = client(config)
    for _ in range(5):
        api.get_node("node-a")
    api.list_pods("node-a")
    assert len({r.connection for r in kube_api.requests}) == 1 and api.requests == 6
    kube_api.break_next(times=1, status=None)  # the server drops it: the next call opens a new one
    api.get_node("node-a")
    assert len({r.connection for r in kube_api.requests}) == 2


def test_a_listing_reads_every_page_and_reduces_each_as_it_arrives(kube_api, config):
    for n in range(5):
        kube_api.add_node("node-%d" % n, labels={"alibabacloud.com/nodepool-id": "np-1" if n % 2 else "np-2"})
    api, _ = client(config, page=2)
    seen = []
    names = api.list_nodes(reduce=lambda obj: seen.append(len(kube_api.requests)) or obj["metadata"]["name"])
    assert names == ["node-0", "node-1", "node-2", "node-3", "node-4"]  # not just the first page
    assert [r.query.count("limit=2") for r in kube_api.requests] == [1, 1, 1]
    assert seen == [1, 1, 2, 2, 3]  # each page reduced before the next one is asked for
    assert api.list_nodes("alibabacloud.com/nodepool-id in (np-1)", reduce=lambda o: o["metadata"]["name"]) == [
        "node-1", "node-3"]


def test_pod_lists_of_a_node_come_from_the_watch_cache(kube_api, config):
    kube_api.add_pod("team", "p", "node-a")
    api, _ = client(config)
    assert [p["metadata"]["name"] for p in api.list_pods("node-a")] == ["p"]
    query = kube_api.requests[-1].query
    assert "resourceVersion=0" in query and "fieldSelector=spec.nodeName%3Dnode-a" in query


@pytest.mark.timeout(60)
def test_a_listing_whose_server_hands_back_the_same_continue_token_stops_at_once(kube_api, config):
    """A server that answers a continued page with the token it was asked with serves that page for as long
    as the token is followed: the listing read it again and again (1,000 pages, each page's items added
    again, each call up to the client's timeout: past the invocation on a slow server) before it gave up.
    A token already followed in this listing now ends it at once with one line."""
    for n in range(7):
        kube_api.add_node("node-%d" % n)
    kube_api.repeat_continue = True
    api, _ = client(config, page=2)
    with pytest.raises(ApiError) as err:
        api.list_nodes(reduce=lambda obj: obj["metadata"]["name"])
    assert len(kube_api.requests) == 2, len(kube_api.requests)  # the first page, then the one that repeats
    assert "continue token" in str(err.value) and "/api/v1/nodes" in str(err.value)


@pytest.mark.parametrize("token", [["t-1"], {"t": 1}, []], ids=["list", "object", "empty-list"])
def test_a_continue_token_that_is_no_text_ends_the_list_as_an_api_error(kube_api, config, token):
    """A list page's ``metadata.continue`` is the API's string. The repeated-token check kept the tokens in a
    set, and one that was a list or an object raised TypeError (unhashable) out of the listing: the tick or
    pod event that listed ended as an internal error, where any other answer that breaks the list is an
    ApiError (the next tick tries again)."""
    api, _ = client(config, page=2)
    api.request = lambda *args, **kw: {"metadata": {"continue": token}}
    with pytest.raises(ApiError) as err:
        api.list_nodes()
    assert "/api/v1/nodes" in str(err.value) and "continue token" in str(err.value), str(err.value)
