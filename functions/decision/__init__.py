"""The pure decisions: per-instance checks, instance families, the autoscaler tags a pool should carry, the
rollout's waves and the mig-parted converter. No I/O."""
