"""The API server's clock as the function reads it (``KubeApi.server_time``): the ``Date`` headers of its
answers (whole seconds, cut down) and this client's own clock since. Every lease, claim, record and the
rollout's deadline are timed on it, so it must never run ahead of the server's clock, never lag it by a
second or more, and never go back while the server's does not.

It went back: it was the last answer's Date plus the time since that answer, so a second answer within the
same second set it back by up to a second. On the real kube-apiserver a rollout that had planned one wave
then found more than a whole wave's time left (its deadline is one wave from its start) and started a
second wave in the same invocation (tests/kube_real/test_rollout_real.py, a node deleted mid-drain)."""

import random

from functions.kube.client import DATE_RESOLUTION_S, KubeApi, server_offset
from node_bootstrap.kube import load_kubeconfig
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)


def test_two_answers_in_one_second_never_set_the_clock_back(kube_api, tmp_path):  # noqa: F811
    local = [0.0]
    kube_api.clock = lambda: 1000.9 + local[0]  # the server's clock: 0.9 s into second 1000 when we start
    kube_api.add_node("node-a")
    api = KubeApi(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "a.conf", cert=kube_api.admin_cert())),
                  attempts=1, clock=lambda: local[0])
    assert api.server_time() is None  # no answer yet: no server clock to tell
    api.get_node("node-a")  # Date: 1000
    local[0] = 0.09
    first = api.server_time()
    api.get_node("node-a")  # still Date 1000 (the server is at 1000.99): the same second, answered later
    second = api.server_time()
    assert first == 1000.09 and second >= first, (first, second)
    assert 1000.99 - DATE_RESOLUTION_S < second <= 1000.99
    local[0] = 0.2
    api.get_node("node-a")  # Date 1001: the bound tightens to the server's clock
    assert 1001.1 - DATE_RESOLUTION_S < api.server_time() <= 1001.1 and api.server_time() >= second


def test_a_server_clock_set_back_is_followed():
    """A Date more than its resolution below what the clock reads cannot come from a steady server clock:
    the server's was set back (an NTP step), and the reads follow it rather than run ahead of it for good."""
    known = server_offset(None, 5000.0)
    assert server_offset(known, 4999.5) == 5000.0  # within the Date's second: the tighter bound stays
    assert server_offset(known, 5000.4) == 5000.4  # a tighter bound
    assert server_offset(known, 3000.0) == 3000.0  # set back by 2,000 s: taken as it is


def test_an_answer_that_took_its_time_is_no_clock_set_back(kube_api, tmp_path):  # noqa: F811
    """The Date is stamped when the server answers, and our clock is read when the whole answer is in: an
    answer stamped late in a second (x.95) that takes a tenth of a second to arrive shows its Date more than
    a second below our clock plus the tight offset, with no step of the server's clock at all. Read as a set
    back, the clock went back by over a second (the ninth review's flake again, on a loaded machine)."""
    local = [0.0]

    def server():  # the server's clock, 1000 s ahead of ours; the answer it stamps arrives 0.1 s later
        now = 1000.0 + local[0]
        local[0] += transit[0]
        return now

    transit = [0.0]
    kube_api.clock = server
    kube_api.add_node("node-a")
    api = KubeApi(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "a.conf", cert=kube_api.admin_cert())),
                  attempts=1, clock=lambda: local[0])
    api.get_node("node-a")  # Date 1000 at our 0.0: the offset is exactly 1000
    assert api.server_time() == 1000.0
    local[0], transit[0] = 0.95, 0.1
    before = api.server_time()
    api.get_node("node-a")  # stamped at 1000.95 (Date 1000), in at our 1.05
    after = api.server_time()
    assert before == 1000.95 and 1001.05 - DATE_RESOLUTION_S < after <= 1001.05, (before, after)


def test_answers_that_take_time_to_arrive_never_set_the_clock_back():
    """Seeded schedules of answers and reads, the server's clock at any offset from ours, each answer stamped anywhere between its request's sending and its arrival
    (up to half a second on the way): no read is below an earlier one, none is ahead of the server's clock,
    and none lags it by more than a second plus the slowest answer's time."""
    for seed in range(200):
        rnd = random.Random(seed)
        offset = rnd.uniform(-1e6, 2e9)
        local, known, last = rnd.uniform(0, 1e4), None, None
        for _ in range(80):
            local += rnd.choice([0.0, 0.001, rnd.uniform(0, 0.3), rnd.uniform(0, 3)])
            if rnd.random() < 0.6:  # an answer: sent now, stamped on the way, in after it
                took = rnd.choice([0.0, 0.002, rnd.uniform(0, 0.5)])
                stamped = local + rnd.uniform(0, took)
                local += took
                known = server_offset(known, float(int((stamped + offset) // 1)) - local, took)
            if known is None:
                continue
            read, true = local + known, local + offset
            assert true - DATE_RESOLUTION_S - 0.5 < read <= true + 1e-6, (seed, read, true)
            assert last is None or read >= last - 1e-6, (seed, read, last)
            last = read
