"""Alibaba Cloud APIs: the core-SDK RPC client (ECS, ESS), ACK cluster lookups (or a snapshot), Auto Scaling
membership and KMS secrets. Which host each is called at is ``functions.base.endpoints``."""
