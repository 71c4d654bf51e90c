"""What ``deploy``, ``undeploy`` and ``doctor`` (in :mod:`functions.commands`) work with: the code package
(``code_package``, ``build``, its dependency lock ``lock``), the credential chain and the caller's account
(``credentials``), OSS (``upload``) and the ROS stack (``ros``).

They run on an operator's machine, never in Function Compute, with the standard Alibaba Cloud credential
chain (environment, ``~/.aliyun/config.json`` profile, instance role). Their SDKs (ROS, OSS) are the
``deploy`` extra of the package and stay out of the function's code package.
"""
