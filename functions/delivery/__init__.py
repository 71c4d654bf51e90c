"""Delivery: gets the node bundle and a validated plan onto each node, runs it, and turns what comes back
into one outcome per node. Transports (Cloud Assistant, SSH, local) share one interface and one result
type (:mod:`.outcome`); the executor adds lifecycle hooks and the startup taint. See README.md, "Delivery"."""
