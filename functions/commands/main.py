"""The ``ack-mig-hook`` command line. Each subcommand lives in its own module and is imported only when
it runs, so ``plan`` never loads the cloud SDKs and a bad argument costs nothing.

Every user-facing failure is one line on stderr, printed once, with the exit code of its cause
(:mod:`functions.commands.stack.exit_codes`, docs/cli.md "Exit codes"): bad input exits 2, refused credentials 4, a
missing RAM permission 5, a cloud state that stops the command 6. Only a bug is an "internal error" (exit 70,
its type and message; set ACK_MIG_HOOK_DEBUG=1 for the traceback). No SDK log line reaches the terminal.
"""

import argparse
import importlib
import sys
from typing import List, Optional

# subcommand -> (module, help). Each module exposes configure(parser) and run(args) -> int.
COMMANDS = {
    "profiles": ("functions.commands.plan", "list the MIG profiles of a GPU model"),
    "plan": ("functions.commands.plan", "place a partition label on a GPU model and show the layout"),
    "invoke": ("functions.commands.invoke", "run the function's pipeline locally on an event file (not the deployed "
                                   "function)"),
    "demo": ("functions.commands.demo", "the bundled example end to end on simulated nodes"),
    "advise": ("functions.commands.advise", "an auto pool's demand, per-GPU plan and reasons; changes nothing"),
    "status": ("functions.commands.status", "the fleet per pool: layout, pending, failed, deferred, MIG resources"),
    "convert": ("functions.commands.convert", "NVIDIA mig-parted configs to pool label values and back"),
    "deploy": ("functions.commands.deploy", "build, upload and create or update the ROS stack, then wait for it; "
                                            "--dry-run shows ROS's plan"),
    "undeploy": ("functions.commands.undeploy", "delete the ROS stack (after a confirmation) and wait until it is "
                                                "gone"),
    "doctor": ("functions.commands.doctor", "read-only preflight: what is ready and what is missing, line by line"),
    "rollout": ("functions.commands.rollout", "pause or resume a node pool's rolling repartition (the pool label "
                                              "ack-mig-hook/paused)"),
}


# Modules of the ``deploy`` extra (pyproject.toml): a command that needs one and runs without it says so in
# one line, exit 2, and its --help still works.
EXTRA_MODULES = ("yaml", "alibabacloud_ros20190910", "alibabacloud_credentials", "alibabacloud_sts20150401", "oss2")
# The package is not on a package index: the extra comes with the clone or the wheel it was installed from.
INSTALL_EXTRA = ("pip install '.[deploy]' in the clone, or 'ack_mig_hook-VERSION-py3-none-any.whl[deploy]' "
                 "(docs/first-deployment.md)")


def missing_extra(exc):
    # type: (BaseException) -> Optional[str]
    """The extra's module ``exc`` says is missing, or None for any other import failure (a bug)."""
    name = getattr(exc, "name", None) or ""
    root = name.split(".")[0]
    return root if isinstance(exc, ImportError) and root in EXTRA_MODULES else None


def _needs_extra(command, module):
    # type: (str, str) -> int
    print("ack-mig-hook: error: %s needs the deploy extra (module %s is missing); install it with: %s"
          % (command, module, INSTALL_EXTRA), file=sys.stderr)
    return 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's default prints usage on two lines; keep it to one
        from functions.commands.terminal import error_lines

        self.exit(2, "\n".join(error_lines("%s; see --help" % message)) + "\n")


def _version():
    from importlib import metadata

    try:
        return metadata.version("ack-mig-hook")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _build(argv):
    parser = _Parser(prog="ack-mig-hook", description="NVIDIA MIG partitions for ACK node pools.")
    parser.add_argument("--version", action="version", version="ack-mig-hook %s" % _version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    name = next((a for a in argv if not a.startswith("-")), None)
    for cmd, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(cmd, help=help_text, description=help_text)
        if cmd == name:  # only the chosen command's module is imported
            try:
                importlib.import_module(module).configure(p, cmd)
            except ImportError as exc:
                if not missing_extra(exc):
                    raise
                # --help still answers; running it says which extra to install
                p.description = "%s (needs the deploy extra: %s)" % (help_text, INSTALL_EXTRA)
                p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def explained(exc):
    """(exit code, message) of a user-facing error (one with ``exit_code``), the code refined when its
    message quotes a credential or permission refusal of a cloud API (a CS lookup's ``ConfigurationError``
    quotes ``SignatureDoesNotMatch``, say); (None, message) for anything else: a bug."""
    from node_bootstrap.mig import MigInputError

    from functions.commands.stack.exit_codes import CloudError, explain

    text = " ".join(str(exc).split())
    if isinstance(exc, MigInputError):
        return 2, text
    code = getattr(exc, "exit_code", None)
    if not isinstance(code, int):
        return None, text
    if isinstance(exc, CloudError):  # it chose its code (and hint) from the service's own error code
        return code, text
    return explain(text, code)


def report(exc):
    # type: (BaseException) -> int
    """Print one error line for ``exc`` and return its exit code (70 and its type for a bug)."""
    from functions.commands.stack.exit_codes import EXIT_INTERNAL
    from functions.base.textsafe import escape  # an error may quote what a server answered

    from functions.commands.terminal import error_lines

    code, text = explained(exc)
    if code is None:
        print("ack-mig-hook: internal error: %s: %s" % (type(exc).__name__, escape(exc)), file=sys.stderr)
        return EXIT_INTERNAL
    print("\n".join(error_lines(escape(text))), file=sys.stderr)
    return code


# Commands whose stdout is for machines whatever the flags: convert writes mig-parted YAML and label lines.
MACHINE_OUTPUT = ("convert",)


class _human_output:
    """Human stdout fitted (terminal.Fitted) for the command's run: to the terminal's width, 80 columns in a
    pipe, ``COLUMNS`` when set; --json and machine output stay whole (scripts read those)."""

    def __init__(self, args):
        self.fit = not getattr(args, "json", False) and args.command not in MACHINE_OUTPUT
        self.saved = None

    def __enter__(self):
        if self.fit:
            from functions.commands.terminal import Fitted

            self.saved, sys.stdout = sys.stdout, Fitted(sys.stdout)
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            fitted, sys.stdout = sys.stdout, self.saved
            fitted.flush()
        return False


def main(argv=None):
    # type: (Optional[List[str]]) -> int
    argv = list(sys.argv[1:] if argv is None else argv)
    from functions.commands.common import quiet_sdk_logs

    quiet_sdk_logs()
    parser = _build(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a bad argument already reported in one line
        return exc.code if isinstance(exc.code, int) else 2
    if not args.command:  # a usage error: the help goes where errors go, as kubectl's does for no verb
        parser.print_help(sys.stderr)
        return 2
    try:
        module = importlib.import_module(COMMANDS[args.command][0])
    except ImportError as exc:
        if not missing_extra(exc):
            raise
        return _needs_extra(args.command, missing_extra(exc))
    try:
        with _human_output(args):
            code = module.run(args)
        sys.stdout.flush()  # piped output is buffered: a closed pipe shows here, not at interpreter exit
        return code
    except KeyboardInterrupt:
        print("ack-mig-hook: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head`): nothing more to say, and nothing must be written to the closed
        # pipe at exit either (Python's docs on SIGPIPE), so stdout points at /dev/null from here on.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by it
    except Exception as exc:  # the last line of defence: no traceback reaches a user
        if missing_extra(exc):  # an extra's module imported where the command needs it
            return _json_error(args, _needs_extra(args.command, missing_extra(exc)), exc)
        from functions.base.settings import DEBUG, env_text

        if env_text(DEBUG) and explained(exc)[0] is None:
            raise
        return _json_error(args, report(exc), exc)


def _json_error(args, code, exc):
    # type: (argparse.Namespace, int, BaseException) -> int
    """With --json, stdout is JSON even when the command fails: an error object with the stderr line's text
    (printed already by report or _needs_extra), as kubectl -o json does."""
    if getattr(args, "json", False):
        import json

        from functions.base.textsafe import escape

        code_known, text = explained(exc)
        if missing_extra(exc):
            text = "%s needs the deploy extra; install it with: %s" % (args.command, INSTALL_EXTRA)
        elif code_known is None:
            text = "internal error: %s: %s" % (type(exc).__name__, text)
        print(json.dumps({"error": escape(text), "exit_code": code}))
        sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
