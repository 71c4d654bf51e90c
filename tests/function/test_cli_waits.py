"""Bounded waits that show themselves: on a terminal a wait longer than 2 s says what it waits for and when
it gives up (terminal.Waiting); invoke's connection to --kubeconfig's API server, bounded by
ACK_MIG_CONNECT_TIMEOUT_S, is tested in test_invoke_cli.py."""

import io
import time

from functions.commands import terminal


def test_a_wait_says_what_it_waits_for_after_its_delay_on_a_terminal_only():
    shown = io.StringIO()
    with terminal.Waiting("the API server at 127.0.0.1:6443", 15, stream=shown, after=0.05, tty=True):
        time.sleep(0.3)
    assert shown.getvalue() == "ack-mig-hook: waiting for the API server at 127.0.0.1:6443 (gives up after 15s)\n"
    quick = io.StringIO()
    with terminal.Waiting("x", 15, stream=quick, after=0.5, tty=True):
        pass
    piped = io.StringIO()
    with terminal.Waiting("x", 15, stream=piped, after=0.05, tty=False):
        time.sleep(0.2)
    assert quick.getvalue() == "" and piped.getvalue() == ""
