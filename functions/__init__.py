"""Function Compute side of ack-mig-hook: event intake, cluster lookup, decisions, delivery, CLI."""
