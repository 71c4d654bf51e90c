"""One event through the function: the envelope and typed payload (intake), the targets and decisions, the
point of change (real or dry-run executor), the autoscaler tag step and the notification."""
