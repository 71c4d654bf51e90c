"""The ``ack-mig-hook`` command line, one module per subcommand (``main`` dispatches). Commands sit on top:
they may import any part of ``functions``, and nothing outside this package imports them."""
