"""Function Compute side of ack-mig-hook. Imports go one way (tests/test_layout.py checks it):

commands/ (the ``ack-mig-hook`` command line) -> handler (the FC entry point) -> pipeline (intake ->
lookup -> decide -> point of change -> result) -> intake, cluster lookup, decide, delivery/, rollout/ ->
node_bootstrap's MIG core. stack/ holds what deploy, undeploy and doctor work with on an operator's machine.
"""
