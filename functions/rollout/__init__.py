"""Rolling repartition of running nodes: ``run`` (from the decisions to a plan), ``executor`` (carrying the
waves out, or saying what it would do) and ``drain`` (which pods must move, which keep a node, one eviction
pass). What is pure about a rollout (which path a node takes, which node needs work, which ones a wave takes)
is ``functions.decision.waves``; the nodes are read through ``functions.kube.nodes``."""
