"""Kubernetes access: the API client (the one module that talks to the API server), the startup taint, and
the node views the rollout reads."""
