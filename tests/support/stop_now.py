"""Stopping a loopback ``socketserver`` server at once.

``shutdown()`` only sets a flag that ``serve_forever``'s loop reads between two polls of its listening socket,
then waits for the loop to end: up to one poll interval (0.05 s for the test servers here, 0.5 s by default)
at every teardown of every server, and a test of the function's whole path stops four or five. A connection
opened and dropped at once ends the poll: the loop reads the flag right away. The dropped connection is
nothing to the server: on a TLS listener its accept fails (the handshake finds it closed, and socketserver
ignores an accept that fails), on a plain one its handler reads no request line and ends. No request is
recorded."""

import socket
import threading


def shutdown_now(server) -> None:
    """``server.shutdown()``, without waiting out the loop's poll."""
    stopper = threading.Thread(target=server.shutdown, daemon=True)
    stopper.start()
    address = server.server_address[:2]
    for _ in range(100):  # a poke may come before the flag is set: poke until the loop has read it
        try:
            socket.create_connection(address, timeout=1).close()
        except OSError:
            break  # nothing accepts: the loop ends at its own poll
        stopper.join(0.002)
        if not stopper.is_alive():
            break
    stopper.join()
