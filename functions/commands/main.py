"""The ``ack-mig-hook`` command line. Each subcommand lives in its own module and is imported only when
it runs, so ``plan`` never loads the cloud SDKs and a bad argument costs nothing.

Every user-facing failure is one line on stderr, printed once, with the exit code of its cause
(:mod:`functions.commands.stack.exit_codes`, docs/cli.md "Exit codes"): bad input exits 2, refused credentials 4, a
missing RAM permission 5, a cloud state that stops the command 6. Only a bug is an "internal error" (exit 70,
its type and message; ``--debug`` or ACK_MIG_HOOK_DEBUG=1 for the traceback). No SDK log line reaches the terminal
unless ``--debug`` asks for them.
"""

import argparse
import importlib
import os
import sys
from typing import List, Optional, Sequence

# subcommand -> (module, help). Each module exposes configure(parser) and run(args) -> int.
COMMANDS = {
    "profiles": ("functions.commands.plan", "list the MIG profiles of a GPU model"),
    "plan": ("functions.commands.plan", "place a partition label on a GPU model and show the layout"),
    "invoke": ("functions.commands.invoke", "run the function's pipeline locally on an event file; --remote: the "
                                            "deployed function, through FC, asynchronously"),
    "demo": ("functions.commands.demo", "the bundled example end to end on simulated nodes"),
    "advise": ("functions.commands.advise", "an auto pool's demand, per-GPU plan and reasons; changes nothing"),
    "status": ("functions.commands.status", "the fleet per pool: layout, pending, failed, deferred, MIG resources"),
    "convert": ("functions.commands.convert", "NVIDIA mig-parted configs to pool label values and back"),
    "deploy": ("functions.commands.deploy", "build, upload and create or update the ROS stack, then wait for it; "
                                            "--dry-run shows ROS's plan"),
    "undeploy": ("functions.commands.undeploy", "delete the ROS stack (after a confirmation) and wait until it is "
                                                "gone"),
    "doctor": ("functions.commands.doctor", "read-only preflight: what is ready and what is missing, line by line"),
    "rollout": ("functions.commands.rollout", "pause, resume or follow a node pool's rolling repartition (status: "
                                              "until every node is in layout)"),
    "wait": ("functions.commands.wait", "wait for the ROS stack's operation in progress to end (after an "
                                        "interrupted deploy), printing its events"),
    "logs": ("functions.commands.sls_logs", "the deployed function's log lines from its SLS logstore, filtered by node, "
                                        "pool, outcome or request id"),
    "version": ("functions.commands.version", "the version of this command line"),
    "completion": ("functions.commands.completion", "a shell completion script (bash, zsh, tcsh), made by shtab "
                                                    "from the commands' own options"),
}
# Commands that take the region from ALIBABA_CLOUD_REGION_ID or the aliyun CLI profile when no --region and no
# ACK_MIG_REGION give one (common.default_region). Not invoke run locally: there the event's region comes next.
PROFILE_REGION = ("status", "deploy", "undeploy", "doctor", "rollout", "wait", "logs")


# Modules of the ``deploy`` extra (pyproject.toml): a command that needs one and runs without it says so in
# one line, exit 2, and its --help still works.
EXTRA_MODULES = ("yaml", "alibabacloud_ros20190910", "alibabacloud_credentials", "alibabacloud_sts20150401", "oss2",
                 "shtab", "alibabacloud_fc20230330", "alibabacloud_sls20201230", "alibabacloud_gateway_sls")
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
    chosen = None  # type: Optional[argparse.ArgumentParser]  # the command's parser, for option suggestions

    argv = ()  # type: Sequence[str]  # the command line being parsed (main sets it): whether it asked for JSON

    def error(self, message):  # argparse's default prints usage on two lines; keep it to one
        from functions.commands.terminal import fail

        text = "%s; see --help" % suggest(message, self)
        # With --json or -o, stdout holds the error object even for a refused argument (YAML with -o yaml, as
        # every other output then is): a script reading it never gets nothing. Only for a command that has
        # those options: completion's and convert's stdout stay theirs.
        own = getattr(self, "chosen", None) or self  # the top parser names the command's (unknown options)
        asked = _asks_for(_Parser.argv) if {"--json", "-o"} & set(own._option_string_actions) else None
        code = fail(text, 2, asked == "json")
        if asked == "yaml":
            import json

            from functions.base.textsafe import one_line
            from functions.commands.output import to_yaml

            doc = {"error": one_line(text), "exit_code": 2}
            try:
                try:
                    sys.stdout.write(to_yaml(doc))
                except ImportError:  # PyYAML is the deploy extra's: JSON is YAML too
                    sys.stdout.write(json.dumps(doc) + "\n")
                sys.stdout.flush()
            except BrokenPipeError:  # the reader went away: the error is said on stderr already, with its code
                _discard_stdout()
        self.exit(code)


def _asks_for(argv):
    # type: (Sequence[str]) -> Optional[str]
    """The machine output a command line asks for ("json" for --json or -o json, "yaml"), before it parses;
    None for none (an -o the parser refuses, -o yml, asked for nothing it knows: stderr only)."""
    formats = ("json", "yaml")
    for i, word in enumerate(argv):
        if word == "--":
            return None
        if word == "--json":
            return "json"
        for f in formats:
            if word in ("--output=" + f, "-o=" + f, "-o" + f):
                return f
        if word in ("-o", "--output") and i + 1 < len(argv) and argv[i + 1] in formats:
            return argv[i + 1]
    return None


def suggest(message, parser):
    # type: (str, argparse.ArgumentParser) -> str
    """argparse's message with a did-you-mean, as git and kubectl say it: a mistyped command, choice (rollout
    stauts, -o yml) or option (--josn) gets the closest one that exists."""
    import re

    from functions.commands.stack.credentials import did_you_mean

    choice = re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)\Z", message)
    if choice:
        what, word, listed = choice.groups()
        choices = re.findall(r"'([^']*)'", listed)
        if what == "COMMAND":
            return "unknown command %r%s; the commands: %s" % (word[:40], did_you_mean(word, choices),
                                                              ", ".join(choices))
        return "argument %s: invalid choice %r%s; choose from %s" % (what, word[:40], did_you_mean(word, choices),
                                                                   ", ".join(choices))
    unknown = re.match(r"unrecognized arguments: (\S+)", message)
    if unknown and unknown.group(1).startswith("-"):
        options = [o for o in ((getattr(parser, "chosen", None) or parser)._option_string_actions)
                   if o.startswith("--")]
        return message + did_you_mean(unknown.group(1).split("=")[0], options)
    return message


def _version():
    from functions.commands.version import version

    return version()


def _common_flags(parser, top):
    # type: (argparse.ArgumentParser, bool) -> None
    """-v/--verbose, --debug and, beside every --json, -o json|yaml: the same in every command, accepted before
    the command too (the command's own default leaves what was given there)."""
    default = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    known = parser._option_string_actions
    if "-v" not in known and "--verbose" not in known:
        parser.add_argument("-v", "--verbose", action="count", default=default(0),
                            help="show the function's log lines on stderr (-v INFO, -vv DEBUG)")
    parser.add_argument("--debug", action="store_true", default=default(False),
                        help="DEBUG log lines, the cloud SDKs' own logs and the traceback of an internal error")
    if "--json" in known:
        from functions.commands.output import FORMATS

        parser.add_argument("-o", "--output", choices=FORMATS, default=None, metavar="FORMAT",
                            help="machine output: json (the same as --json) or yaml")


def _build(argv, every=False):
    """The parser; only the chosen command's module is imported and configured (``every``: all of them, for
    completion scripts)."""
    parser = _Parser(prog="ack-mig-hook", description="NVIDIA MIG partitions for ACK node pools.")
    parser.add_argument("--version", action="version", version="ack-mig-hook %s" % _version())
    _common_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    name = next((a for a in argv if not a.startswith("-")), None)
    for cmd, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(cmd, help=help_text, description=help_text)
        if cmd == name or every:  # only the chosen command's module is imported
            parser.chosen = p
            try:
                importlib.import_module(module).configure(p, cmd)
            except ImportError as exc:
                if not missing_extra(exc):
                    raise
                # --help still answers; running it says which extra to install
                p.description = "%s (needs the deploy extra: %s)" % (help_text, INSTALL_EXTRA)
                p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        _common_flags(p, top=False)
    return parser


def full_parser():
    """Every command's parser, configured (what a completion script is made from)."""
    return _build([], every=True)


def explained(exc):
    """(exit code, message) of a user-facing error (one with ``exit_code``), the code refined when its
    message quotes a credential or permission refusal of a cloud API (a CS lookup's ``ConfigurationError``
    quotes ``SignatureDoesNotMatch``, say); (None, message) for anything else: a bug."""
    from node_bootstrap.mig import MigInputError

    from functions.base.textsafe import one_line
    from functions.commands.stack.exit_codes import CloudError, explain

    from functions.base.logs import redact_shown

    text = redact_shown(one_line(exc))  # an SDK's message may quote a server's answer, a token in it
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
        print("ack-mig-hook: internal error: %s: %s" % (type(exc).__name__, escape(text)), file=sys.stderr)
        return EXIT_INTERNAL
    print("\n".join(error_lines(escape(text))), file=sys.stderr)
    return code


# Commands whose stdout is for machines whatever the flags: convert writes mig-parted YAML and label lines,
# completion a shell script.
MACHINE_OUTPUT = ("convert", "completion")


class _human_output:
    """The streams fitted (terminal.Fitted) for the command's run: human stdout to the terminal's width, 80
    columns in a pipe, ``COLUMNS`` when set; --json and machine output stay whole (scripts read those), and
    ``-o yaml`` turns the JSON into YAML (output.YamlStream). stderr is fitted the same way, for every command:
    only the function's JSON log lines (``-v``) pass whole."""

    def __init__(self, args):
        self.args = args
        self.fit = not getattr(args, "json", False) and args.command not in MACHINE_OUTPUT
        self.saved = None

    def __enter__(self):
        from functions.commands.output import YamlStream, wants_yaml
        from functions.commands.terminal import Fitted, Guarded, Redacted

        self.saved = sys.stdout, sys.stderr
        sys.stdout = Guarded(sys.stdout)  # a write that fails (a full disk) is said as such, never as a bug
        if self.fit:
            sys.stdout = Fitted(sys.stdout)
        elif wants_yaml(self.args):
            sys.stdout = YamlStream(sys.stdout)
        sys.stderr = Fitted(sys.stderr, keep=lambda line: line.startswith("{"))
        # Every line through the redactor, before it is wrapped (a wrap can part a token from its name)
        sys.stdout, sys.stderr = Redacted(sys.stdout), Redacted(sys.stderr)
        return self

    def __exit__(self, *exc):
        from functions.commands.terminal import OutputError

        if self.saved is not None:
            out, err = sys.stdout, sys.stderr
            sys.stdout, sys.stderr = self.saved
            for stream in (out, err):
                if stream not in self.saved:
                    try:
                        stream.flush()
                    except (BrokenPipeError, OutputError):  # stdout's reader went away, or a failed write: said by main
                        pass
        return False


def _debugging(args):
    # type: (argparse.Namespace) -> bool
    from functions.base.settings import DEBUG, env_text

    return bool(getattr(args, "debug", False) or env_text(DEBUG))


def _sdk_logs(args):
    # type: (argparse.Namespace) -> None
    """--debug: the cloud SDKs' own log records (requests, retries, credential providers) on stderr."""
    import logging

    from functions.base.logs import sdk_log_formatter
    from functions.commands.common import SDK_LOGGERS

    if not getattr(args, "debug", False):
        return
    handler = logging.StreamHandler(sys.stderr)
    # oss2 logs each request's signed headers: the STS token and the signature, masked as in every other line
    handler.setFormatter(sdk_log_formatter("ack-mig-hook: debug: %(name)s: %(message)s"))
    for name in SDK_LOGGERS:
        logger = logging.getLogger(name)
        logger.disabled, logger.handlers = False, [handler]
        logger.setLevel(logging.DEBUG)


def main(argv=None):
    # type: (Optional[List[str]]) -> int
    from functions.commands.terminal import Redacted, Unheard

    saved = sys.stderr
    # From the first word on: argparse writes its own refusal before any command runs. Started with stderr
    # closed (2>&-), Python's sys.stderr is None and print(file=None) writes to stdout: nowhere to say a problem,
    # the exit code still does, and stdout stays the command's (a --json reader gets JSON alone).
    sys.stderr = Redacted(Unheard(open(os.devnull, "w") if saved is None else saved))
    try:
        code = _main(argv)
        return _flushed(code)
    except BrokenPipeError:  # what argparse printed (--help, --version) met a reader gone (_flushed)
        _discard_stdout()
        return 141  # EXIT_PIPE: 128 + SIGPIPE, as every command's
    finally:
        sys.stderr = saved


def _discard_stdout():
    from functions.commands.terminal import discard_stdout

    try:
        discard_stdout()
    except (OSError, ValueError, AttributeError):  # no descriptor of its own (a test's StringIO)
        pass


def _flushed(code):
    # type: (int) -> int
    """``code``, once stdout is flushed. What argparse printed (--help, --version) is still buffered when the
    command line ends: a reader gone (``--help | head -1``) is met here, a quiet 141 as for every command,
    instead of Python's "Exception ignored ... BrokenPipeError" and exit 120 at the interpreter's exit; a full
    disk is one line and exit 1, as a command's own output."""
    from functions.commands.terminal import OutputError

    if sys.stdout is None:
        return code
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        _discard_stdout()  # what is still buffered must not fail again at exit
        return report(OutputError("cannot write the output to stdout: %s" % (exc.strerror or exc)))
    return code


def _main(argv):
    # type: (Optional[List[str]]) -> int
    argv = list(sys.argv[1:] if argv is None else argv)
    from functions.commands.common import quiet_sdk_logs

    quiet_sdk_logs()
    parser = _build(argv)
    _Parser.argv = argv
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a bad argument already reported in one line
        return exc.code if isinstance(exc.code, int) else 2
    if not args.command:  # a usage error: the help goes where errors go, as kubectl's does for no verb
        parser.print_help(sys.stderr)
        return 2
    if getattr(args, "output", None):  # -o json|yaml: the command writes its JSON (YAML is made from it)
        args.json = True
    try:
        module = importlib.import_module(COMMANDS[args.command][0])
        if getattr(args, "output", None) == "yaml":
            importlib.import_module("yaml")
    except ImportError as exc:
        if not missing_extra(exc):
            raise
        return _needs_extra(args.command, missing_extra(exc))
    _sdk_logs(args)
    if sys.stdout is None:  # started with stdout closed (>&-): refused before anything is asked or changed
        from functions.commands.terminal import error_lines

        print("\n".join(error_lines("stdout is closed: nothing could be printed; run it with stdout open "
                                     "(> /dev/null discards the output)")), file=sys.stderr)
        return 2
    if sys.stdin is None:  # started with stdin closed (<&-): it reads as empty, as /dev/null does ("event is empty",
        sys.stdin = open(os.devnull)  # undeploy's "stdin is not a terminal"), never as a bug in --event - or -
    with _human_output(args):
        return _run(module, args)


def _run(module, args):
    # type: (object, argparse.Namespace) -> int
    from functions.commands.terminal import OutputError, discard_stdout

    try:
        if args.command in PROFILE_REGION:
            from functions.commands.common import default_region

            default_region(args)
        args.full_parser = full_parser  # completion's: every command's parser
        code = module.run(args)
        sys.stdout.flush()  # piped output is buffered: a closed pipe shows here, not at interpreter exit
        return code
    except KeyboardInterrupt:
        print("ack-mig-hook: interrupted", file=sys.stderr)
        return 130
    except OutputError as exc:  # stdout could not be written (a full disk): one line, and nothing more to it
        discard_stdout()
        return report(exc)
    except BrokenPipeError:
        # The reader went away (`... | head`): nothing more to say, and nothing must be written to the closed
        # pipe at exit either (Python's docs on SIGPIPE), so stdout points at /dev/null from here on.
        discard_stdout()
        return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by it
    except Exception as exc:  # the last line of defence: no traceback reaches a user
        if missing_extra(exc):  # an extra's module imported where the command needs it
            return _json_error(args, _needs_extra(args.command, missing_extra(exc)), exc)
        if _debugging(args) and explained(exc)[0] is None:
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
        from functions.commands.terminal import OutputError, discard_stdout

        try:
            print(json.dumps({"error": escape(text), "exit_code": code}))
            sys.stdout.flush()
        except (BrokenPipeError, OutputError):  # the error is said on stderr already, with its code
            discard_stdout()
    return code


if __name__ == "__main__":
    sys.exit(main())
