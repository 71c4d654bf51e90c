"""Rolling repartition of running nodes: ``waves`` (pure: which node needs work, which ones this wave
takes), ``run`` (the executors that carry a wave out), ``drain`` (which pods must move, one eviction pass)
and ``kube`` (the function's view of the Kubernetes API, live or in memory)."""
