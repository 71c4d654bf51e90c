"""Alibaba Cloud APIs: endpoints, the core-SDK RPC client (ECS, ESS), ACK cluster lookups, Auto Scaling
membership and KMS secrets."""
