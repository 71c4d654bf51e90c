from tests.support.kubeapi import kube_api  # noqa: F401  (the local HTTPS API server fixture)
