"""bench/demand_peers.py (the peers beside the auto pool) and bench/demand_alibaba.py (the production trace
as MIG demand): each peer's placement rule as its source describes it, the shared autoscaler, the waits,
the no-eviction rule, and the trace's mapping. The trace rows here are made up in the test (the real data
is never part of the repository)."""

import os
import sys

import pytest

pytest.importorskip("highspy")  # the dev extra's: the bound and the static pool
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

import demand  # noqa: E402
import demand_alibaba  # noqa: E402
import demand_noevict  # noqa: E402
import demand_peers as dp  # noqa: E402
from demand_traces import PodEvent  # noqa: E402
from node_bootstrap.mig.catalogue import find_gpu  # noqa: E402

MODEL = "NVIDIA A100-SXM4-80GB"
GPU = find_gpu(MODEL)
NAMES = {"1g": "1g.10gb", "2g": "2g.20gb", "3g": "3g.40gb", "4g": "4g.40gb", "7g": "7g.80gb"}


def _node(name, *gpus):
    return dp.Node(name, [dict(g) for g in gpus] + [{} for _ in range(dp.GPUS_PER_NODE - len(gpus))], 0)


def test_dra_takes_the_first_free_placement_of_the_first_gpu_that_fits():
    node = _node("a", {("4g.40gb", 0): "x"})
    three, four = dp.Pod("p3", "3g.40gb", 0, 5), dp.Pod("p4", "4g.40gb", 0, 5)
    assert dp.DraFirstFit(GPU).place([node], three) and three.bound == ("a", 0, ("3g.40gb", 4))
    assert dp.DraFirstFit(GPU).place([node], four) and four.bound == ("a", 1, ("4g.40gb", 0))
    # a GPU whose compute is spent takes nothing more, though memory slots are free
    full = _node("b", {("4g.40gb", 0): "x", ("2g.20gb", 4): "y", ("1g.10gb", 6): "z"})
    one = dp.Pod("p1", "1g.10gb", 0, 5)
    assert dp.DraFirstFit(GPU).place([full], one) and one.bound[1] == 1


def test_hami_binpacks_the_busier_node_and_gpu_not_the_first():
    idle, busy = _node("a"), _node("b", {("1g.10gb", 0): "x"}, {("3g.40gb", 0): "y"})
    pod = dp.Pod("p", "1g.10gb", 0, 5)
    assert dp.Hami(GPU).place([idle, busy], pod)
    assert pod.bound == ("b", 1, ("1g.10gb", 6))  # the GPU with 3 of 7 slices used, its highest free start


def test_hami_places_1g_and_3g_at_the_highest_free_start_and_the_others_at_the_lowest():
    """HAMi's selectMigPlacement (pkg/device/nvidia/mig_topology.go, orderedMigPlacements: profiles named 1g.* and
    3g.* take their free placements highest start first, the others lowest first), as its own
    TestSelectMigPlacementUsesBalancedPacking lays out an A100: 3g at 4, 2g at 0, 1g at 3, then at 2. At the
    lowest start a 3g pod would take the half that a later 4g pod needs."""
    hami, node = dp.Hami(GPU), _node("a")
    starts = []
    for i, profile in enumerate(["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]):
        pod = dp.Pod("p%d" % i, profile, 0, 5)
        assert hami.place([node], pod) and pod.bound[1] == 0
        starts.append(pod.bound[2][1])
    assert starts == [4, 0, 3, 2]
    # a 3g pod, then a 4g pod: both on one GPU (the 3g left slices 0-3 free)
    node = _node("b")
    three, four = dp.Pod("t", "3g.40gb", 0, 5), dp.Pod("f", "4g.40gb", 0, 5)
    assert hami.place([node], three) and hami.place([node], four)
    assert three.bound == ("b", 0, ("3g.40gb", 4)) and four.bound == ("b", 0, ("4g.40gb", 0))


def test_hami_binpack_counts_the_instances_a_gpu_and_a_node_hold_beside_compute_and_memory():
    """HAMi's binpack scores (default weights 1, 1, 1): a GPU by ComputeScore (pkg/scheduler/policy/gpu_policy.go:
    (used + 1) / count + cores + memory, the request included; a MIG GPU's count is its largest InstanceCount,
    7 on an A100, register.go), a node by ComputeDefaultScore (node_policy.go: the same three shares over its
    GPUs), the highest first. Three 1g pods (3 slices, 3 memory slots, 3 instances) outscore one 3g pod (3, 4,
    1): compute and memory alone would pick the 3g's node and GPU."""
    ones = {("1g.10gb", 6): "a", ("1g.10gb", 5): "b", ("1g.10gb", 4): "c"}
    three = {("3g.40gb", 4): "d"}
    pod = dp.Pod("p", "1g.10gb", 0, 5)
    assert dp.Hami(GPU).place([_node("y", three), _node("x", ones)], pod) and pod.bound == ("x", 0, ("1g.10gb", 3))
    pod = dp.Pod("q", "1g.10gb", 0, 5)
    assert dp.Hami(GPU).place([_node("z", three, ones)], pod) and pod.bound == ("z", 1, ("1g.10gb", 3))


def test_binding_to_an_idle_instance_breaks_ties_by_node_then_gpu_then_start():
    """demand._bind's scheduler, which _bind_idle says it follows: the most compute in use first, then the first
    node, its first GPU, that GPU's lowest start; the start of one GPU's instance does not outrank the order
    of nodes and GPUs."""
    a = _node("a", {("3g.40gb", 0): "x", ("1g.10gb", 6): None, ("1g.10gb", 5): None})
    b = _node("b", {("3g.40gb", 4): "y", ("1g.10gb", 0): None})
    pod = dp.Pod("p", "1g.10gb", 0, 5)
    assert dp._bind_idle(GPU, [a, b], pod) and pod.bound == ("a", 0, ("1g.10gb", 5))


def test_the_shared_autoscaler_adds_a_node_when_pods_wait_and_removes_it_when_empty():
    events = [PodEvent("ns/a", "o", "3g", 0, 4), PodEvent("ns/b", "o", "3g", 0, 4), PodEvent("ns/c", "o", "1g", 1, 2)]
    row = dp.simulate(dp.DraFirstFit(GPU), events, NAMES, 8, 0.5, boot_steps=2, idle_steps=1)
    # no node at first: asked for at step 0, ready at step 2; pod c left at step 2 before any node was there
    assert row["served"] == 2 and row["never_served"] == 1 and row["wait_max_min"] == 60.0
    assert row["peak_nodes"] == 1 and row["peak_gpus"] == 1  # both 3g pods on one GPU (first fit)
    # asked at the end of step 0, billed from step 1 (booting included), removed at the end of its first
    # empty step (4): 4 steps of half an hour
    assert row["node_hours"] == 2.0 and row["gpu_hours"] == 1.0 and row["evicted"] == 0


def test_a_fixed_sequence_never_serves_a_profile_it_lacks():
    events = [PodEvent("ns/a", "o", "3g", 0, 3), PodEvent("ns/b", "o", "1g", 0, 3)]
    ack = [p for p in dp.peers(GPU, MODEL, ["1g.10gb", "3g.40gb"], {"1g.10gb": 1, "3g.40gb": 1}, 0.5)
           if p.name == "ack-7x1g"][0]
    row = dp.simulate(ack, events, NAMES, 5, 0.5)
    assert row["unservable"] == 1 and row["served"] == 1


def test_the_bench_plans_the_auto_pool_under_the_hooks_dwell():
    # dwell.py with the defaults (600 s, 300 s): at step 1 the plan repartitions the node's last GPU for the 3g
    # pod; the 3g pod leaves at step 2 and a 7g pod arrives at step 3 that needs that GPU back. In minutes it
    # waits until it has waited more than 5 (step 9); in half hours the dwell has passed before the next step.
    events = [PodEvent("ns/w%d" % i, "o", "7g", 0, 40) for i in range(7)] + \
        [PodEvent("ns/t", "o", "3g", 0, 2), PodEvent("ns/late", "o", "7g", 3, 40)]
    names = sorted(NAMES[k] for k in ("3g", "7g"))
    for step_h, late_step in ((1 / 60.0, 9), (0.5, 3)):
        peer = dp.AutoPool(GPU, MODEL, names, step_h)
        row = dp.simulate(peer, events, NAMES, 12, step_h, boot_steps=1, idle_steps=10)
        assert row["served"] == 9 and row["scale_outs"] == 1 and row["peak_nodes"] == 1, step_h
        # the cold start waits one step (the boot); the late pod from step 3 to the step its GPU changes back
        assert row["wait_max_min"] == pytest.approx(60 * step_h * max(1, late_step - 3)), step_h
        assert peer.changed == {("n00000", 7): late_step * step_h * 3600}, step_h  # only that GPU changed


def test_every_peer_over_a_synthetic_day_evicts_nothing_and_no_peer_beats_the_bound():
    import demand_traces
    events = demand_traces.trace("mixed", 8, 2, 16)
    run = dp.compare(GPU, MODEL, events, NAMES, 16, 0.5)
    assert [p["peer"] for p in run["peers"]][:4] == ["auto", "dra-first-fit", "hami", "static-pool"]
    assert all(p["evicted"] == 0 for p in run["peers"])
    static = run["peers"][3]
    assert static["never_served"] == 0 and static["waited"] == 0  # sized for every profile's peak
    for p in run["peers"]:  # a peer that served every pod cannot hold fewer GPUs than the repacking bound
        if p["never_served"] == 0:
            assert p["gpu_hours"] >= run["bound"]["gpu_hours"]


def test_the_bound_without_evictions_counts_the_node_a_lone_long_pod_keeps():
    """Whole-GPU pods, 8 a node. Step 0: a (to step 4) and s1-s7 (to 2); step 1: b (to 4) and t1-t7 (to 2).
    Repacked each step: 1, 2, 1, 1 nodes = 5. Never moved: a and b share a node only if, at step 1, a's
    node has room for b beside its pods while the other 14 fill the rest, which takes a second node at step 0
    already (2, 2, 1, 1 = 6); else a and b end on two nodes (1, 2, 2, 2 = 7). So 6, one more than repacking."""
    events = ([PodEvent("ns/a", "o", "7g", 0, 4), PodEvent("ns/b", "o", "7g", 1, 4)]
              + [PodEvent("ns/s%d" % i, "o", "7g", 0, 2) for i in range(7)]
              + [PodEvent("ns/t%d" % i, "o", "7g", 1, 2) for i in range(7)])
    assert dp.lower_bound(GPU, events, NAMES, 4, 1.0)["node_hours"] == 5.0
    kept = demand_noevict.node_hours(GPU, events, NAMES, 4, 1.0, max_nodes=4)
    assert kept["node_hours"] == 6.0 and kept["proven"]
    # with room for b beside a from the start (s1-s6 only), one node is enough at every step but the second
    assert demand_noevict.node_hours(GPU, [e for e in events if e.key != "ns/s6"], NAMES, 4, 1.0,
                                     max_nodes=4)["node_hours"] == 5.0


def test_the_bound_without_evictions_lies_between_repacking_and_a_peer_that_serves_at_arrival():
    import demand_traces
    events = demand_traces.trace("mixed", 8, 2, 16)
    run = dp.compare(GPU, MODEL, events, NAMES, 16, 0.5, no_eviction_s=30.0)
    kept = run["no_eviction_bound"]
    assert run["bound"]["node_hours"] <= kept["node_hours"]
    for p in run["peers"]:  # serving every pod at arrival and never moving one: at least the bound
        if p["never_served"] == 0 and p["waited"] == 0:
            assert p["node_hours"] >= kept["node_hours"], p
    assert run["repack_bound_below_no_eviction_pct"] >= 0
    # cut short, it reports HiGHS' proven bound, never below the repack bound, and says it is not the optimum
    cut = demand_noevict.node_hours(GPU, events, NAMES, 16, 0.5, max_nodes=6, time_limit=1e-4)
    assert not cut["proven"] and cut["status"] == "Time limit reached"
    assert run["bound"]["node_hours"] <= cut["node_hours"] <= kept["node_hours"]


def test_gpu_hours_per_served_divides_by_the_share_of_a_gpu_the_served_pods_held():
    # one 3g pod (3 of 7 compute slices) held two half-hour steps (it waits step 1 for its node): one GPU-hour
    # for 3/7 of a GPU-hour served
    row = dp.simulate(dp.DraFirstFit(GPU), [PodEvent("ns/a", "o", "3g", 1, 4)], NAMES, 6, 0.5, boot_steps=1)
    assert row["gpu_hours"] == 1.0 and row["served_share_hours"] == round(3 / 7.0, 1)
    assert row["gpu_hours_per_served"] == round(7 / 3.0, 3)


def test_a_tie_in_gpu_hours_per_served_is_not_the_fewest():
    """Whole-GPU pods: every peer that serves them holds one GPU per pod, 1.000 GPU-hours per GPU-hour served
    each. The auto pool then has no fewer than the others, as its GPU-hours goals count a tie (strictly
    fewer)."""
    events = [PodEvent("ns/a%d" % i, "o", "7g", 0, 3) for i in range(3)]
    run = dp.compare(GPU, MODEL, events, NAMES, 4, 0.5)
    per = {p["peer"]: p["gpu_hours_per_served"] for p in run["peers"]}
    assert per["auto"] == per["dra-first-fit"] == per["hami"] == 1.0
    assert run["auto_fewest_gpu_hours_per_served"] is False and run["auto_fewest_gpu_hours"] is False


@pytest.mark.parametrize("milli, klass", [(1, "1g"), (142, "1g"), (143, "2g"), (428, "3g"), (429, "4g"),
                                          (571, "4g"), (572, "7g"), (1000, "7g")])
def test_gpu_milli_maps_to_the_smallest_profile_whose_compute_covers_it(milli, klass):
    assert demand_alibaba.slice_class(milli) == klass


def _csv(path, rows):
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    path.write_text(head + "".join("%s,1000,1024,%d,%d,,LS,Running,%d,%d,%d\n" % (r + (r[3],)) for r in rows))
    return str(path)


def test_the_trace_window_counts_pods_alive_in_it_and_the_rounding_cost(tmp_path):
    day = 86400
    path = _csv(tmp_path / "pods.csv", [
        ("p-cpu", 0, 0, 0, 10 * day),  # CPU only: not demand
        ("p-old", 1, 500, 0, 9 * day),  # alive when the window opens: arrives at step 0
        ("p-two", 2, 1000, 9 * day, 9 * day + 3600),  # two GPUs: two 7g pods
        ("p-last", 1, 200, 10 * day, 10 * day + 60)])  # the last creation ends the window: not in it
    events, steps, cost = demand_alibaba.events(demand_alibaba.read_rows(path), 2, 3600)
    assert steps == 48
    assert [(e.key, e.klass, e.arrive, e.leave) for e in events] == [
        ("trace/p-old", "4g", 0, 24), ("trace/p-two-0", "7g", 24, 25), ("trace/p-two-1", "7g", 24, 25)]
    # p-old: 0.5 GPU asked, 4/7 given, for 24 h; p-two: 2 x 1 GPU for 1 h
    assert cost["fractional_gpu_hours"] == 14.0 and cost["instance_gpu_hours"] == round(24 * 4 / 7 + 2, 1)


def test_a_trace_file_without_the_columns_is_one_line_naming_them(tmp_path, monkeypatch, capsys):
    bad = tmp_path / demand.TRACE_FILES[0]
    bad.write_text("name,gpu\np,1\n")
    with pytest.raises(demand_alibaba.TraceError, match="column num_gpu, gpu_milli, creation_time, deletion_time missing"):
        demand_alibaba.read_rows(str(bad))
    monkeypatch.setattr(demand, "PEER_RUNS_FULL", [])
    assert demand.main(["--peers", "--trace", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "column num_gpu" in err and "Traceback" not in err


def test_without_the_trace_its_rows_are_skipped_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(demand, "PEER_RUNS_FULL", [("mixed", 8)])
    notes = []
    runs = demand.peer_runs(False, str(tmp_path / "absent"), note=notes.append)
    assert len(runs) == 1 and len(notes) == 1 and "github.com/alibaba/clusterdata" in notes[0]


def test_seed_runs_count_the_seeds_on_which_each_margin_holds():
    rows = demand.seed_runs(2, demands=[("mixed", 8)], steps=12)
    assert len(rows) == 1 and rows[0]["seeds"] == 2 and rows[0]["demand"] == "mixed (synthetic, load for 8 GPUs)"
    r = rows[0]
    assert 0 <= r["auto_fewest_gpu_hours_full_peers"] <= 2 and 0 <= r["auto_node_hours_within_5pct"] <= 2
    assert r["auto_gpu_hours_vs_best_full_peer_pct_mean"] <= r["auto_gpu_hours_vs_best_full_peer_pct_max"]
    assert r["auto_node_hours_over_bound_pct_mean"] <= r["auto_node_hours_over_bound_pct_max"]
    # the two seeds are two demands: the same seed twice would be one
    import demand_traces
    assert demand_traces.trace("mixed", 8, 1, 12) != demand_traces.trace("mixed", 8, 2, 12)


@pytest.mark.parametrize("argv", [["--seeds", "3"], ["--peers", "--seeds", "0"]])
def test_seeds_without_peers_or_below_one_is_a_usage_line(argv, capsys):
    assert demand.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["demand.py: --seeds N needs --peers and N of at least 1 (e.g. --peers --seeds 5)"]


def test_an_earlier_week_is_the_same_window_moved_back(tmp_path):
    day = 86400
    path = _csv(tmp_path / "pods.csv", [
        ("p-early", 1, 500, 1 * day, 2 * day),  # in the window a week back only
        ("p-late", 1, 200, 9 * day, 9 * day + 3600),  # in the last window only
        ("p-last", 1, 200, 15 * day, 15 * day + 60)])  # the last creation: ends the last window
    rows = demand_alibaba.read_rows(path)
    now, back = demand_alibaba.events(rows, 7, 3600), demand_alibaba.events(rows, 7, 3600, weeks_back=1)
    assert [e.key for e in now[0]] == ["trace/p-late"] and [e.key for e in back[0]] == ["trace/p-early"]
    assert now[1] == back[1] == 7 * 24
    # p-early: created 1 day after the earlier window opened (day 15 - 7 - 7 = day 1: at its first step)
    assert [(e.arrive, e.leave) for e in back[0]] == [(0, 24)]


def test_week_runs_count_the_weeks_with_pods_on_which_each_margin_holds(tmp_path, monkeypatch):
    day = 86400
    _csv(tmp_path / "pods.csv", [
        ("a-%d" % i, 1, 300 + 100 * (i % 5), 1 * day + 3600 * i, 2 * day + 3600 * i) for i in range(6)] + [
        ("b-%d" % i, 1, 300 + 100 * (i % 5), 9 * day + 3600 * i, 10 * day + 3600 * i) for i in range(6)] + [
        ("p-last", 1, 200, 15 * day, 15 * day + 60)])
    monkeypatch.setattr(demand, "TRACE_FILES", ("pods.csv",))
    rows = demand.week_runs(3, str(tmp_path))  # the third week back holds no pod: left out
    assert len(rows) == 1 and rows[0]["weeks"] == 2 and rows[0]["demand"] == "pods.csv, 7-day windows"
    r = rows[0]
    assert 0 <= r["auto_fewest_gpu_hours_full_peers"] <= 2 and 0 <= r["auto_node_hours_within_5pct"] <= 2
    assert r["auto_gpu_hours_vs_best_full_peer_pct_mean"] <= r["auto_gpu_hours_vs_best_full_peer_pct_max"]
    assert "weeks" in demand._seed_table(rows, "weeks").splitlines()[0]


@pytest.mark.parametrize("argv", [["--weeks", "3"], ["--peers", "--weeks", "0"], ["--peers", "--weeks", "2",
                                                                                  "--seeds", "2"]])
def test_weeks_without_peers_or_out_of_range_is_a_usage_line(argv, capsys):
    assert demand.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["demand.py: --weeks N needs --peers, no --seeds, and N from 1 to 52 (e.g. --peers --weeks 5)"]


def test_weeks_without_the_trace_is_one_line_and_no_table(tmp_path, capsys):
    assert demand.main(["--peers", "--weeks", "2", "--trace", str(tmp_path / "absent")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "github.com/alibaba/clusterdata" in err
