"""``ack-mig-hook doctor``'s Kubernetes checks read through the function's one client: its lists page
(a cluster larger than one page is read to the end), and a busy API server is tried again."""

import argparse

from functions.commands import doctor


def test_doctor_pages_its_lists_and_retries_a_busy_api_server(kube_api, tmp_path):
    for n in range(501):  # one more than a page
        kube_api.add_node("node-%03d" % n)
    kube_api.label_node("node-500", {"nvidia.com/mig.config": "all-balanced"})  # on the second page
    kube_api.add_pod("kube-system", "nvidia-device-plugin-x", "node-000")
    kube_api.throttle(times=1, retry_after=1, method="GET", path="/api/v1/nodes")
    args = argparse.Namespace(kubeconfig=kube_api.write_kubeconfig(tmp_path / "k.conf", cert=kube_api.admin_cert()),
                              cluster_id="c-x")
    found = doctor._kube_checks(args, None)
    checks = {c.area: c for c in found}
    assert checks["mig-manager"].status == "warn" and "(1 nodes labelled nvidia.com/mig.config)" in \
        checks["mig-manager"].text
    node_lists = [r for r in kube_api.requests if r.path == "/api/v1/nodes"]
    assert [r.status for r in node_lists] == [429, 200, 200]
    assert all("limit=500" in r.query for r in node_lists) and "continue=" in node_lists[-1].query
    rbac = [c for c in found if c.area == "rbac"]  # no ClusterRole, no events grant here: said, not crashed
    assert [c.status for c in rbac] == ["PROBLEM", "warn"] and "no RoleBinding in default" in rbac[1].text
