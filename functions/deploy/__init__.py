"""Operator-side commands: ``deploy``, ``undeploy`` and ``doctor``.

They run on an operator's machine, never in Function Compute, with the standard Alibaba Cloud credential
chain (environment, ``~/.aliyun/config.json`` profile, instance role). Their SDKs (ROS, OSS) are the
``deploy`` extra of the package and stay out of the function's code package.
"""
