"""Rolling repartition of running nodes: ``waves`` (pure: which path a node takes, which node needs work,
which ones this wave takes), ``run`` (from the decisions to a plan), ``executor`` (carrying the waves out, or
saying what it would do), ``drain`` (which pods must move, which keep a node, one eviction pass) and
``kube`` (the event's view of the nodes, over the live client ``functions.kubeapi`` or in memory)."""
