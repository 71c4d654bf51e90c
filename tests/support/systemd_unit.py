"""A unit file read as systemd reads it, to run a unit's command the way systemd would.

Only what our units use, and strict about the rest (anything else fails the test instead of being guessed):

- systemd.syntax(7): ``[Section]`` headers, ``Key=value`` lines, ``#``/``;`` comments; no line continuation.
- systemd.service(5), "Command lines": ExecStart is split into words, each either bare or in double or
  single quotes, with C-style backslash escapes; specifiers are expanded (``%%`` is a literal ``%``, any
  other specifier is refused here: our units hold none), then ``$$`` is a literal ``$`` while ``$VAR`` and
  ``${VAR}`` would be the environment's (refused here: a path holding ``$`` must reach us as written). A
  prefix (``@``, ``-``, ``:``, ``+``, ``!``) on the executable is refused (ours have none), and it must be an
  absolute path.
- systemd.exec(5), ``Environment=``: space-separated ``VAR=value`` words, quoted like the command line,
  specifiers expanded, no ``$`` expansion.
- systemd.path(5), ``PathChanged=``: an absolute path, the rest of the line, specifiers expanded, no quoting.
- systemd.exec(5), "Environment Variables in Spawned Processes": a system service starts with ``PATH`` set to
  systemd's default and nothing else of ours; the working directory is ``/`` (``WorkingDirectory=`` unset).
"""

import re
import subprocess
from typing import Dict, List, Optional

SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "s": " "}


class UnitSyntaxError(ValueError):
    pass


def sections(text: str) -> Dict[str, List[tuple]]:
    """``{section: [(key, value), ...]}`` in file order."""
    out: Dict[str, List[tuple]] = {}
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.endswith("\\"):
            raise UnitSyntaxError("line %d continues: our units never do" % number)
        if stripped.startswith("[") and stripped.endswith("]"):
            current = out.setdefault(stripped[1:-1], [])
            continue
        if current is None or "=" not in stripped:
            raise UnitSyntaxError("line %d is neither a section nor Key=value: %r" % (number, line))
        key, value = stripped.split("=", 1)
        current.append((key.strip(), value.strip()))
    return out


def words(value: str) -> List[str]:
    """systemd's extract_first_word with unquoting and C escapes, over a whole value."""
    out, i, n = [], 0, len(value)
    while i < n:
        if value[i] in " \t":
            i += 1
            continue
        word, quote = [], None
        while i < n:
            c = value[i]
            if quote is None and c in " \t":
                break
            if c == "\\":
                if i + 1 >= n or value[i + 1] not in _ESCAPES:
                    raise UnitSyntaxError("escape %r not used by our units" % value[i:i + 2])
                word.append(_ESCAPES[value[i + 1]])
                i += 2
                continue
            if quote is None and c in "\"'":
                quote = c
            elif c == quote:
                quote = None
            else:
                word.append(c)
            i += 1
        if quote is not None:
            raise UnitSyntaxError("unterminated quote in %r" % value)
        out.append("".join(word))
    return out


def specifiers(word: str) -> str:
    """``%%`` -> ``%``; any other specifier is refused (our units write none)."""
    found = re.search(r"%(?!%)", word.replace("%%", ""))
    if found:
        raise UnitSyntaxError("specifier in %r: our units only write %%%%" % word)
    return word.replace("%%", "%")


def dollars(word: str) -> str:
    """``$$`` -> ``$``; a ``$VAR``/``${VAR}`` systemd would expand is refused."""
    if "$" in word.replace("$$", ""):
        raise UnitSyntaxError("%r would be expanded from the environment" % word)
    return word.replace("$$", "$")


class Unit:
    def __init__(self, text: str):
        self.text = text
        self.sections = sections(text)

    def values(self, key: str, section: str = "Service") -> List[str]:
        return [v for k, v in self.sections.get(section, []) if k == key]

    def exec_start(self) -> List[str]:
        lines = self.values("ExecStart")
        if len(lines) != 1:
            raise UnitSyntaxError("a oneshot of ours has exactly one ExecStart, not %d" % len(lines))
        argv = [dollars(specifiers(w)) for w in words(lines[0])]
        if not argv or argv[0][:1] in "@-:+!" or not argv[0].startswith("/"):
            raise UnitSyntaxError("ExecStart must start with an absolute executable, no prefix: %r" % argv[:1])
        return argv

    def environment(self) -> Dict[str, str]:
        env: Dict[str, str] = {}
        for line in self.values("Environment"):
            for word in words(line):
                name, sep, value = specifiers(word).partition("=")
                if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", name):
                    raise UnitSyntaxError("Environment= word %r is not VAR=value" % word)
                env[name] = value
        return env

    def service_env(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """What a system service starts with: systemd's PATH and the unit's Environment=, nothing else."""
        env = {"PATH": SYSTEMD_PATH}
        env.update(self.environment())
        env.update(extra or {})
        return env

    def start(self, argv: Optional[List[str]] = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run ExecStart (or ``argv``, the same command with paths moved) as systemd would: clean
        environment, working directory ``/``, stdin from /dev/null."""
        return subprocess.run(argv or self.exec_start(), env=self.service_env(), cwd="/", stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=timeout)


    def path_changed(self) -> List[str]:
        """systemd.path(5) ``PathChanged=``: the rest of the line (trimmed, no quoting), specifiers expanded;
        it must be absolute."""
        out = [specifiers(v) for v in self.values("PathChanged", "Path")]
        if any(not p.startswith("/") for p in out):
            raise UnitSyntaxError("PathChanged= must be an absolute path: %r" % out)
        return out


# ---- ack-mig-hook's units ----

def node_args(argv: List[str]) -> List[str]:
    """node_bootstrap's arguments in a unit's command: after ``-m node_bootstrap``, or in the runner's form
    (``python [flags] RUNNER HASH ROOT ARGS_B64 DEADLINE PYTHON INSTANCE NAMES GRACE``) inside ARGS_B64."""
    import base64
    import json

    if "-m" in argv:
        return argv[argv.index("-m") + 2:]
    at = [i for i, a in enumerate(argv) if a.endswith("/ack_mig_runner.py")][0] + 3
    return json.loads(base64.b64decode(argv[at]).decode("utf-8"))


def with_node_args(argv: List[str], change) -> List[str]:
    """The same command with node_bootstrap's arguments passed through ``change`` (a list to a list)."""
    import base64
    import json

    if "-m" in argv:
        at = argv.index("-m") + 2
        return argv[:at] + change(argv[at:])
    at = [i for i, a in enumerate(argv) if a.endswith("/ack_mig_runner.py")][0] + 3
    encoded = base64.b64encode(json.dumps(change(node_args(argv))).encode("utf-8")).decode("ascii")
    return argv[:at] + [encoded] + argv[at + 1:]


def request_under(argv: List[str], root: str, config_dir: str = "/etc/ack-mig-hook/") -> List[str]:
    """The boot unit's command on a node whose ``/`` is ``root`` (a simulated node's host directory): its
    request file path moved under ``root``."""
    import os

    moved = os.path.join(root, config_dir.lstrip("/"))  # ends in "/" as config_dir does
    return with_node_args(argv, lambda args: [a.replace(config_dir, moved) for a in args])
