"""``ack-mig-hook completion SHELL``: a completion script for bash, zsh, tcsh (and what else the installed
shtab supports), made by shtab from the commands' own argparse definitions, so it completes every command,
option and choice there is and never drifts from them. Options that take a file (``--event``,
``--inventory``, ``--kubeconfig``...: metavar FILE) complete file names; ``--deps-dir`` directories.

    source <(ack-mig-hook completion bash)                            # this shell
    ack-mig-hook completion zsh > "${fpath[1]}/_ack-mig-hook"         # zsh, for good

shtab is part of the deploy extra.
"""

SHELLS = ("bash", "zsh", "tcsh")  # the shells every shtab release since 1.3 writes


def configure(parser, command):
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")


def script(shell: str, full_parser) -> str:
    """``full_parser()``: every command's parser, configured (main's; a command importing main would be an
    import circle, so main hands it over as ``args.full_parser``)."""
    import shtab

    parser = full_parser()
    _mark_paths(parser, shtab)
    return shtab.complete(parser, shell=shell)


def _mark_paths(parser, shtab) -> None:
    """File and directory completion where an option takes one (argparse has no type for it: the metavar
    says so)."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _mark_paths(sub, shtab)
        elif action.metavar == "FILE":
            action.complete = shtab.FILE
        elif action.metavar == "DIR":
            action.complete = shtab.DIRECTORY


def run(args) -> int:
    print(script(args.shell, args.full_parser))
    return 0
