"""Every shell command the docs show must work as written.

The fenced shell blocks (```sh, ```bash, ```shell, ```console) of README.md and docs/*.md are read;
the commands that run offline are run, and must exit 0, or N when the line ends with a comment
``# exit N``:

- ``ack-mig-hook plan | profiles | convert | version | completion``, ``ack-mig-hook status --inventory ...``,
  ``ack-mig-hook rollout status ... --inventory ...``, ``ack-mig-hook invoke ... --inventory ...`` (with or
  without ``--dry-run``), ``scripts/mutation.py --list``;
- ``python3 -m node_bootstrap ... --backend sim:...`` and the other commands of a block that works on a
  simulated node (``cat`` of the simulated host's files).

- ``ack-mig-hook deploy | undeploy | doctor | rollout | wait ... # exit 2``: bad input, refused before any call.

Each block runs in order in its own shell session from the repository root (so ``examples/...`` and
``.venv/bin/...`` resolve as a reader's would). PATH is a reader's after ``make install``: ``ack-mig-hook``
is found, and ``python3`` is the machine's own (without pynvml), so a simulator command must name the
interpreter that works, ``.venv/bin/python``. ``/tmp/`` in a command is a fresh temporary directory per
block, so simulated node state never lands in the real /tmp and two blocks never share a node. No
credentials are in the environment and every cloud endpoint points at a closed loopback port: a command
that would reach a cloud API fails fast instead of leaving the machine.

In a ``console`` block, the lines after a ``$ `` command are its sample output: when a sample is shown it
must be the whole of what the terminal shows, stderr and stdout in the order they are written.

Every other ``ack-mig-hook`` or ``node_bootstrap`` command shown (deploy, doctor, undeploy, rollout, a
real-GPU node command) cannot run here, so each of its options is checked against that command's ``--help``;
the cloud commands also run as written against the loopback emulators in
tests/function/test_docs_cloud_commands.py (docs/first-deployment.md's in test_first_deployment.py).
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
SHELL_LANGS = ("sh", "bash", "shell", "console")
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[A-Za-z0-9_-]*)[ \t]*$")
ASSIGNMENTS = re.compile(r"""^\s*(?:[A-Za-z_][A-Za-z0-9_]*=(?:"[^"]*"|'[^']*'|[^\s;"']*)\s*;?\s*)+$""")
EXPECT_EXIT = re.compile(r"#\s*exit\s+(\d+)\b")
# Anything that needs a cloud account, a cluster, a real GPU or minutes: shown, never run here.
NEVER_RUN = re.compile(r"\b(aliyun|kubectl|ossutil|make|curl|ssh|systemctl|nvidia-smi|pip)\b"
                       r"|ack-mig-hook\s+(deploy|undeploy|doctor|demo|wait|logs)\b"
                       r"|ack-mig-hook\s+rollout\b(?!.*--inventory\b)")
OFFLINE = [
    re.compile(r"ack-mig-hook\s+(plan|profiles|convert|version|completion)\b"),
    re.compile(r"ack-mig-hook\s+rollout\s+status\b.*--inventory\b"),
    re.compile(r"ack-mig-hook\s+status\b.*--inventory\b"),
    re.compile(r"ack-mig-hook\s+invoke\b.*--inventory\b"),
    re.compile(r"ack-mig-hook\s+advise\b.*--inventory\b"),
    re.compile(r"-m\s+node_bootstrap\b.*--backend[ =]sim:"),
    re.compile(r"scripts/mutation\.py\s+--list\b"),  # the mutants listed: the tests that catch them are not run
]
# Cloud commands given bad input: refused before any call, so they run here too.
BAD_INPUT = re.compile(r"ack-mig-hook\s+(deploy|undeploy|doctor|rollout|wait|logs)\b.*#\s*exit\s+2\b")
KINDS = {k: re.compile(r"ack-mig-hook\s+%s\b" % k)
         for k in ("plan", "profiles", "convert", "status", "invoke", "advise", "deploy", "undeploy", "doctor", "rollout",
                   "wait", "logs", "version", "completion")}
KINDS["node_bootstrap"] = re.compile(r"-m\s+node_bootstrap\b")
CLI_WORD = re.compile(r"(?:^|[\s|;&(])(?:\S*/)?(ack-mig-hook|python3?\s+-m\s+node_bootstrap)\s+(.*)$")


def doc_files():
    docs = os.path.join(ROOT, "docs")
    names = sorted(n for n in os.listdir(docs) if n.endswith(".md")) if os.path.isdir(docs) else []
    return ["README.md"] + ["docs/%s" % n for n in names]


def shell_blocks(path):
    """(language, first line number, [lines]) of each fenced shell block, its indentation removed."""
    blocks, lines = [], open(os.path.join(ROOT, path), encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group("lang"):
            i += 1
            continue
        indent, lang, start, body = m.group("indent"), m.group("lang").lower(), i + 1, []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1
        if lang in SHELL_LANGS:
            blocks.append((lang, start + 1, body))
    return blocks


def _open(text):
    """Whether ``text`` ends inside a quoted string or after a line continuation."""
    if text.rstrip().endswith("\\"):
        return True
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return True
    return False


def logical_lines(lang, body):
    """The command lines of a block, continuation lines and multi-line quoted strings joined; in a
    console block only the lines after a ``$ `` prompt are commands (the rest is output)."""
    return [cmd for cmd, _ in commands_with_output(lang, body)]


def commands_with_output(lang, body):
    """(command, sample output lines or None) of a block: in a console block, the lines up to the next
    ``$ `` prompt are the command's sample output (None when there are none)."""
    out, current = [], None
    for line in body:
        if current is not None:
            current += "\n" + line
            if not _open(current):
                out.append([current, None])
                current = None
            continue
        if lang == "console":
            if not line.startswith("$ "):
                if out and line.strip():
                    out[-1][1] = (out[-1][1] or []) + [line]
                continue
            line = line[2:]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if _open(line):
            current = line
        else:
            out.append([line, None])
    if current is not None:
        out.append([current, None])
    return [(cmd, sample) for cmd, sample in out]


def is_offline(command, prelude, block):
    """Whether ``command`` (with the block's variable assignments before it) runs offline. ``block`` is
    the whole block's text: a line that writes or reads a simulated node's files runs when the block
    works on a simulated node, even before the sim command itself."""
    text = "\n".join(prelude + [command])
    if BAD_INPUT.search(command):
        return True
    if NEVER_RUN.search(command):
        return False
    if any(p.search(command) for p in OFFLINE):
        return True
    # `B="--backend sim:..."` set earlier in the block, then `python3 -m node_bootstrap ... $B`
    if re.search(r"-m\s+node_bootstrap\b", command) and re.search(r"--backend[ =]sim:", text):
        return True
    # a simulated node's files, written or read around the sim commands of the same block
    return (re.match(r"(cat|echo|printf)\s", command) is not None and "/tmp/" in command
            and re.search(r"--backend[ =]sim:", block) is not None)


def collect():
    """(file, block line, [(command, prelude, expected exit, sample output)]) per block, and the commands
    not run."""
    runnable, shown = [], []
    for path in doc_files():
        for lang, line_no, body in shell_blocks(path):
            prelude, cmds, pairs = [], [], commands_with_output(lang, body)
            lines = [cmd for cmd, _ in pairs]
            for cmd, sample in pairs:
                if ASSIGNMENTS.match(cmd):
                    prelude.append(cmd)
                    continue
                m = EXPECT_EXIT.search(cmd)
                if is_offline(cmd, prelude, "\n".join(lines)):
                    cmds.append((cmd, list(prelude), int(m.group(1)) if m else 0, sample))
                else:
                    shown.append(("%s:%d" % (path, line_no), cmd, list(prelude)))
            if cmds:
                runnable.append(("%s:%d" % (path, line_no), cmds))
    return runnable, shown


RUNNABLE, SHOWN = collect()


def _reader_path():
    """PATH as a reader has it after ``make install``: ``ack-mig-hook`` resolves (a folder holding only it),
    the interpreters are the machine's own (no virtual environment of the test run on it)."""
    shim = tempfile.mkdtemp(prefix="docs-path-")
    os.symlink(os.path.join(VENV_BIN, "ack-mig-hook"), os.path.join(shim, "ack-mig-hook"))
    keep = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not re.search(r"[/\\]\.venv(-node)?[/\\](bin|Scripts)$", p) and p != VENV_BIN]
    return os.pathsep.join([shim] + keep)


READER_PATH = _reader_path()


def offline_env(tmp):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_", "ALICLOUD_", "FC_", "VIRTUAL_ENV", "PYTHON"))}
    closed = "http://127.0.0.1:9"  # discard port: nothing listens, a stray call fails at once
    env.update(PATH=READER_PATH, HOME=str(tmp), TMPDIR=str(tmp),
               ACK_MIG_CS_ENDPOINT=closed, ACK_MIG_ECS_ENDPOINT=closed, ACK_MIG_ESS_ENDPOINT=closed,
               ACK_MIG_KMS_ENDPOINT=closed, ACK_MIG_ROS_ENDPOINT=closed, ACK_MIG_OSS_ENDPOINT=closed,
               ACK_MIG_STS_ENDPOINT=closed, ACK_MIG_FC_ENDPOINT=closed, ACK_MIG_SLS_ENDPOINT=closed,
               ACK_MIG_API_TIMEOUT_S="2", ACK_MIG_API_MAX_ATTEMPTS="1",
               ALIBABA_CLOUD_ECS_METADATA_DISABLED="true", PYTHONDONTWRITEBYTECODE="1",
               PYTHONUNBUFFERED="1")  # stderr and stdout reach the pipe in the order they are written
    return env


def in_tmp(text, tmp):
    return text.replace("/tmp/", str(tmp) + "/")


def test_the_docs_show_enough_offline_commands_to_mean_something():
    total = sum(len(cmds) for _, cmds in RUNNABLE)
    readme = sum(len(cmds) for where, cmds in RUNNABLE if where.startswith("README.md:"))
    kinds = {k for _, cmds in RUNNABLE for c, _, _, _ in cmds for k, pattern in KINDS.items() if pattern.search(c)}
    assert total >= 15, "only %d offline commands found in the docs" % total
    assert readme >= 3, "the README's quick start shows only %d commands that run offline" % readme
    assert kinds == set(KINDS), "no offline example of %s in the docs" % ", ".join(sorted(set(KINDS) - kinds))


@pytest.mark.parametrize("where,cmds", RUNNABLE, ids=[w for w, _ in RUNNABLE])
def test_every_offline_command_in_the_docs_works_as_written(where, cmds, tmp_path):
    env, failures = offline_env(tmp_path), []
    for cmd, prelude, expected, sample in cmds:
        script = "set -o pipefail\n" + "\n".join(in_tmp(p, tmp_path) for p in prelude) + "\n" + in_tmp(cmd, tmp_path)
        proc = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=60)
        shown = proc.stdout.replace(str(tmp_path) + "/", "/tmp/")
        if proc.returncode != expected:
            failures.append("%s\n  exit %d, expected %d\n  output: %s" % (
                cmd, proc.returncode, expected, shown.strip()[-600:]))
        elif "Traceback (most recent call last)" in shown:
            failures.append("%s\n  printed a traceback:\n%s" % (cmd, shown[-600:]))
        elif sample is not None and [l.rstrip() for l in shown.splitlines()] != [l.rstrip() for l in sample]:
            failures.append("%s\n  the sample output is not what the terminal shows:\n%s" % (cmd, shown[-1500:]))
    assert not failures, "%s:\n" % where + "\n".join(failures)


def test_a_mutant_the_docs_run_alone_is_one_the_list_has():
    """``scripts/mutation.py --only ID`` runs a mutant's tests (minutes), so it is not run here; ``--list --only ID``
    is, which refuses an ID that names no mutant: a mutant renamed leaves the page's command failing at once."""
    named = [(where, m.group(1)) for where, cmd, _ in SHOWN
             for m in re.finditer(r"scripts/mutation\.py\b.*--only[ =]([\w-]+)", cmd)]
    assert named, "the docs show no scripts/mutation.py --only"
    for where, ident in named:
        proc = subprocess.run([sys.executable, "scripts/mutation.py", "--list", "--only", ident], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout.startswith(ident), "%s: --only %s: %s" % (
            where, ident, proc.stdout[-300:])


def test_sample_outputs_are_compared():
    compared = [cmd for _, cmds in RUNNABLE for cmd, _, _, sample in cmds if sample is not None]
    assert len(compared) >= 6, compared
    assert any("node_bootstrap" in c for c in compared) and any("ack-mig-hook" in c for c in compared)


def test_simulator_commands_name_the_interpreter_that_works():
    """``python3`` is the machine's own Python, which lacks pynvml: a simulator command says
    ``.venv/bin/python``. (On a real node ``python3`` is right: the node tool runs on its system Python.)"""
    wrong = ["%s: %s" % (where, cmd) for where, cmds in RUNNABLE for cmd, _, _, _ in cmds
             if re.search(r"(^|[\s;&|(])python3? -m node_bootstrap\b", cmd)]
    assert wrong == []


def _help_options(words):
    """The long options ``<command> --help`` lists, for an ack-mig-hook or node_bootstrap command."""
    if words[0] == "ack-mig-hook":
        argv = [os.path.join(VENV_BIN, "ack-mig-hook")] + words[1:] + ["--help"]
    else:
        argv = [sys.executable, "-m", "node_bootstrap"] + words[1:] + ["--help"]
    proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=60)
    assert proc.returncode == 0, "%s --help: %s" % (" ".join(words), proc.stdout[-300:])
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", proc.stdout))


def inline_commands():
    """Commands written inline in the prose (`ack-mig-hook ...`, `python3 -m node_bootstrap ...`)."""
    found = []
    for path in doc_files():
        text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", open(os.path.join(ROOT, path), encoding="utf-8").read(),
                      flags=re.S | re.M)
        for span in re.findall(r"`([^`\n]+)`", text):
            if re.match(r"(\.venv/bin/)?ack-mig-hook [a-z]|python3? -m node_bootstrap [a-z-]+ ", span):
                found.append((path, span, []))
    return found


def shown_cli_commands():
    """(where, program words, options) of each ack-mig-hook / node_bootstrap command not run here."""
    found = []
    for where, cmd, _ in SHOWN + inline_commands():
        for segment in re.split(r"\|\||&&|[|;]", cmd.replace("\\\n", " ")):
            m = CLI_WORD.search(segment.split("#", 1)[0])
            if not m:
                continue
            try:
                args = shlex.split(m.group(2))
            except ValueError:
                continue
            program = "ack-mig-hook" if m.group(1) == "ack-mig-hook" else "node_bootstrap"
            sub = next((a for a in args if not a.startswith("-") and not a.startswith("$")), None)
            if sub is None or not re.match(r"^[a-z][a-z-]*$", sub):
                continue
            opts = sorted({a.split("=", 1)[0] for a in args if a.startswith("--")})
            found.append((where, [program, sub], opts))
    return found


def test_commands_that_need_a_cloud_account_use_real_options():
    shown = shown_cli_commands()
    assert any(w[1] == "deploy" for _, w, _ in shown), "the docs show no ack-mig-hook deploy command"
    assert any(w[1] == "doctor" for _, w, _ in shown), "the docs show no ack-mig-hook doctor command"
    cache, wrong = {}, []
    for where, words, opts in shown:
        key = tuple(words)
        if key not in cache:
            cache[key] = _help_options(words)
        unknown = [o for o in opts if o not in cache[key]]
        if unknown:
            wrong.append("%s: %s %s: unknown %s" % (where, words[0], words[1], ", ".join(unknown)))
    assert not wrong, "\n".join(wrong)


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path):
    """GitHub's heading anchors of a markdown file: lower case, punctuation dropped, spaces to hyphens."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)  # a '#' comment in a code block is no heading
    return {re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def test_every_link_between_the_docs_leads_somewhere():
    broken, checked = [], 0
    for path in doc_files():
        full = os.path.join(ROOT, path)
        text = re.sub(r"^```.*?^```", "", open(full, encoding="utf-8").read(), flags=re.S | re.M)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked offline
            checked += 1
            name, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(full), name)) if name else full
            if not os.path.exists(dest):
                broken.append("%s: %s (no such file)" % (path, target))
            elif anchor and dest.endswith(".md") and anchor not in _anchors(dest):
                broken.append("%s: %s (no such heading)" % (path, target))
    assert checked >= 20, "only %d links between the docs: the README's map of the docs is missing" % checked
    assert not broken, "\n".join(broken)


def _codes_in_the_code():
    """Every outcome and failure code a person can meet, read from the sources: node_bootstrap's error
    codes, delivery's transport codes and Cloud Assistant's mapping, the node outcomes, the rollout's."""
    import glob

    found = set()
    sources = glob.glob(os.path.join(ROOT, "node_bootstrap", "**", "*.py"), recursive=True) + \
        glob.glob(os.path.join(ROOT, "functions", "**", "*.py"), recursive=True)
    for path in sources:
        text = open(path, encoding="utf-8").read()
        found.update(re.findall(r"\b(?:code|error)\s*=\s*\"([a-z][a-z-]+)\"", text))
        found.update(re.findall(r"\"code\":\s*\"([a-z][a-z-]+)\"", text))  # a result's error written as a dict
        found.update(re.findall(r"\"[A-Z][a-z]+[A-Z][A-Za-z.]*\":\s*\"([a-z]+(?:-[a-z]+)+)\"", text))  # service code -> ours
        for names, values in re.findall(r"^([A-Z_]+(?:, [A-Z_]+)*) = (\"[a-z-]+\"(?:, \"[a-z-]+\")*)$", text, re.M):
            if any(k in names for k in ("PARTITIONED", "UNCHANGED", "REBOOT", "DEFERRED", "DRAIN", "APPLYING")):
                found.update(re.findall(r"\"([a-z-]+)\"", values))
    return found - {"failed"}  # the outcome itself; its codes are the rows


def test_troubleshooting_explains_every_outcome_and_code():
    codes = _codes_in_the_code()
    assert {"gpu-busy", "agent-not-ready", "partitioned", "drain-timeout", "conflict"} <= codes, codes
    doc = open(os.path.join(ROOT, "docs", "troubleshooting.md"), encoding="utf-8").read()
    missing = sorted(c for c in codes if "`%s`" % c not in doc)
    assert missing == [], "docs/troubleshooting.md does not explain %s" % ", ".join(missing)


def test_the_readme_stays_an_introduction():
    """At most 300 lines, and no development history: that belongs in CHANGELOG.md and git."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert len(text.splitlines()) <= 300
    history = [m.group(0) for m in re.finditer(
        r"\btests?/\S+\.py::\w+|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b|\b[Nn]ew in (this|the)\b"
        r"|\bat commit\b", text)]
    history = [h for h in history if not re.fullmatch(r"c[0-9a-f]{32}", h)]  # an ACK cluster id, not a commit
    assert history == [], "history in the README: %s" % history
    for section in ("How it compares", "Quick start", "Deploy", "Check that it worked", "Documentation"):
        assert re.search(r"^## %s" % re.escape(section), text, re.M), "README lacks the section %s" % section


def test_the_docs_show_real_cluster_ids():
    """ACK cluster ids are ``c`` and 32 lower-case hex digits: an example in the docs has that form, unless
    it shows the refusal of a wrong one (``# exit 2``)."""
    from functions.commands.common import CLUSTER_ID

    wrong = []
    for path in doc_files():
        for number, line in enumerate(open(os.path.join(ROOT, path), encoding="utf-8"), 1):
            for value in re.findall(r"--cluster-id[ =]([^\s`\\]+)", line):
                if not CLUSTER_ID.match(value.strip("\"'")) and not EXPECT_EXIT.search(line) \
                        and not value.startswith(("$", "ID", "<")):
                    wrong.append("%s:%d: %s" % (path, number, value))
    assert wrong == []


def _test_files():
    found = {}  # tests/ and checks/ (what CI runs beside the suite)
    for base, _, names in [w for top in ("tests", "checks") for w in os.walk(os.path.join(ROOT, top))]:
        for name in names:
            if name.startswith("test_") and name.endswith(".py"):
                path = os.path.relpath(os.path.join(base, name), ROOT)
                found[path] = open(os.path.join(ROOT, path), encoding="utf-8").read()
    return found


def test_every_test_the_docs_name_exists():
    """A page that names a test as the proof of a promise (``tests/x/test_y.py::test_z``, ``test_y.py``, a bare
    ``test_z`` after its file) names one that is there: a test renamed or merged left the page pointing at
    nothing, and the promise with no test anyone can find."""
    files = _test_files()
    defined = {name for text in files.values() for name in re.findall(r"^\s*def (test_\w+)\(", text, re.M)}
    ref = re.compile(r"((?:[\w.-]+/)*test_\w+\.py)?::(test_\w+)|((?:[\w.-]+/)*test_\w+\.py)|\b(test_\w+)\b")
    wrong, checked = [], 0
    for path in doc_files():
        last = None
        for match in ref.finditer(open(os.path.join(ROOT, path), encoding="utf-8").read()):
            given, name, alone, bare = match.groups()
            if alone or given:
                last = alone or given
                owners = [f for f in files if f == last or f.endswith("/" + last) or f == "tests/" + last]
                if not owners:
                    wrong.append("%s: %s (no such test file)" % (path, last))
                    continue
            checked += 1
            if name:
                owners = [f for f in files if last and (f == last or f.endswith("/" + last) or f == "tests/" + last)]
                if not any(re.search(r"^\s*def %s\(" % name, files[f], re.M) for f in owners):
                    wrong.append("%s: %s::%s (no such test in that file)" % (path, last, name))
            elif bare and bare not in defined:
                wrong.append("%s: %s (no such test)" % (path, bare))
    assert checked >= 100, "only %d tests named in the docs" % checked
    assert not wrong, "\n".join(wrong)


def _make_targets():
    text = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    targets = set(re.findall(r"^([a-z][a-z-]*)\s*:(?!=)", text, re.M))
    for names in re.findall(r"^\.PHONY:(.*)$", text, re.M):
        targets.update(names.split())
    return targets


def test_every_make_command_the_docs_show_is_a_target_and_ci_runs_what_they_say():
    """``make X`` in a shell block or a code span is a command a person types: X is a Makefile target. And what
    CI runs (.ci/run) is each described in docs/development.md, so "what CI runs" on a page stays true."""
    targets, shown, wrong = _make_targets(), [], []
    for path in doc_files():
        text = open(os.path.join(ROOT, path), encoding="utf-8").read()
        spans = re.findall(r"`(make [^`\n]+)`", re.sub(r"^[ \t]*```.*?^[ \t]*```", "", text, flags=re.S | re.M))
        lines = [line for _, _, block in shell_blocks(path) for line in block]
        for cmd in spans + lines:
            for target in re.findall(r"(?:^|&&|;)\s*make\s+([a-z][a-z-]*)", cmd):
                shown.append(target)
                if target not in targets:
                    wrong.append("%s: make %s (no such target)" % (path, target))
    assert {"demo", "test"} <= set(shown), shown
    assert not wrong, "\n".join(wrong)
    ci = re.findall(r"^\s*make\s+([a-z][a-z-]*)", open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read(), re.M)
    development = open(os.path.join(ROOT, "docs", "development.md"), encoding="utf-8").read()
    assert ci and all("| `make %s` | what CI runs" % t in development for t in ci), ci
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    said = re.search(r"^make test\s+#(.*)$", readme, re.M)
    assert said and ("CI runs first" in said.group(1) or len(ci) == 1), \
        "README says `make test` is what CI runs, but .ci/run also runs %s" % ci[1:]


def test_the_commands_cli_md_says_take_no_kubeconfig_are_the_ones_without_it():
    """docs/cli.md's shared flags: ``--kubeconfig`` is "not on X or Y, which never read it". The commands named
    there are exactly the cloud commands (those with ``--cluster-id``) whose parser has no ``--kubeconfig``: a
    reader told a command has none does not look for it, and one told it has gets a usage error."""
    import argparse

    from functions.commands.main import full_parser

    text = " ".join(open(os.path.join(ROOT, "docs", "cli.md"), encoding="utf-8").read().split())
    said = re.search(r"\(not on ((?:`[a-z]+`(?:, | or )?)+)[,;]? which never read it", text)
    assert said, "docs/cli.md no longer says which commands have no --kubeconfig"
    named = set(re.findall(r"`([a-z]+)`", said.group(1)))
    subs = next(a for a in full_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    without = {name for name, p in subs.items()
               if "--cluster-id" in p._option_string_actions and "--kubeconfig" not in p._option_string_actions}
    assert named == without, "docs/cli.md names %s; the commands without --kubeconfig are %s" % (
        sorted(named), sorted(without))


# Files a page names that are no file of this repository, each for a reason: what the product or another tool
# writes at run time, a file of another project, or one the page imagines an attacker planting.
NAMED_ELSEWHERE = {
    "ack_mig_runner.py": "node_runner.py as the bundle holds it on a node",
    "stopped-clients.json": "written by node_bootstrap in its --state-dir",
    "queued-clients.json": "written by node_bootstrap in its --state-dir",
    "state.json": "written by the test control plane in its directory",
    "direct_url.json": "pip's record of where a package was installed from",
    "pynvml.py": "nvidia-ml-py's module, which the bundle carries",
    "sitecustomize.py": "a file Python imports from its path: what the node runner keeps out",
    "json.py": "a module planted beside the runner: what the node runner keeps out",
    "facts.md": "the shared reference docs/gpus.md cites as a source, outside the repository",
}
FILE_NAME = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:py|ya?ml|json|txt|sh|toml|md))`")


def test_every_file_of_the_repository_the_docs_name_is_there():
    """A path the docs give from the repository's root (``functions/...``, ``bench/...``) is a file or folder
    there, and a file named alone (``node_runner.py``) is the name of one of its files: a module renamed left
    the page naming nothing a reader can open. Paths of other projects (``deployments/systemd/...``) and
    absolute paths on a node are not checked; run-time files are listed above with the reason."""
    import subprocess as sp

    tracked = sp.run(["git", "ls-files"], cwd=ROOT, stdout=sp.PIPE, universal_newlines=True, check=True).stdout.split()
    names = {os.path.basename(p) for p in tracked}
    tops = {p.split("/", 1)[0] for p in tracked} | {"tests", "dist", ".venv"}
    wrong = []
    for path in doc_files():
        text = open(os.path.join(ROOT, path), encoding="utf-8").read()
        for named in FILE_NAME.findall(text):
            if "/" in named:
                if named.split("/", 1)[0] in tops and not os.path.exists(os.path.join(ROOT, named)):
                    wrong.append("%s: %s (no such path)" % (path, named))
            elif named not in names and named not in NAMED_ELSEWHERE:
                wrong.append("%s: %s (no file of that name)" % (path, named))
    assert not wrong, "\n".join(wrong)


REAL_NODE = re.compile(r"(?:^|[\s;&|(])python3 (?:-B )?-m node_bootstrap\s+[a-z-]+")


def real_node_commands():
    """(where, the lines before it in its block, command) of each node_bootstrap command shown for a real node
    (``python3 -m node_bootstrap``: the node's system Python), in a block or a code span of the prose."""
    found = []
    for path in doc_files():
        for lang, line_no, body in shell_blocks(path):
            lines = logical_lines(lang, body)
            found += [("%s:%d" % (path, line_no), lines[:i], cmd) for i, cmd in enumerate(lines) if REAL_NODE.search(cmd)]
        text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", open(os.path.join(ROOT, path), encoding="utf-8").read(),
                      flags=re.S | re.M)
        # a span that is a whole command (one that shows what the function runs holds placeholders: [...], ...)
        found += [(path, [], span) for span in re.findall(r"`([^`\n]+)`", text)
                  if REAL_NODE.search(span) and "..." not in span and "[" not in span]
    return found


def test_a_node_command_shown_for_a_real_node_finds_node_bootstrap(tmp_path):
    """On a node, node_bootstrap is in the bundle the function delivered (``<node root>/bundles/<sha256>/``),
    not on the system Python's path: a page's ``python3 -m node_bootstrap ...`` works only from there (a ``cd``
    into it, or ``PYTHONPATH``). Each such command is run as shown, with the lines of its block that set that
    up (``cd``, assignments), in a fresh directory on a node whose default root holds the real bundle, and
    ``--help`` in place of its arguments: it must find node_bootstrap."""
    import io
    import lzma
    import tarfile

    from functions.delivery.bundle import build
    from functions.base.settings import DEFAULT_NODE_ROOT

    bundle = build()
    root = str(tmp_path / DEFAULT_NODE_ROOT.lstrip("/"))
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(bundle.packed))) as tar:
        tar.extractall(os.path.join(root, "bundles", bundle.digest))
    home = tmp_path / "home"
    home.mkdir()
    env = dict(offline_env(tmp_path), HOME=str(home))
    shown, wrong = real_node_commands(), []
    assert len(shown) >= 3, shown
    for where, before, cmd in shown:
        setup = [line for line in before if ASSIGNMENTS.match(line) or re.match(r"cd\s", line)]
        asked = re.sub(r"(-m node_bootstrap\s+[a-z-]+).*$", r"\1 --help", cmd, flags=re.S)
        script = "\n".join(setup + [asked]).replace(DEFAULT_NODE_ROOT, root).replace("HASH", bundle.digest)
        proc = subprocess.run(["bash", "-c", "set -e\n" + script], cwd=str(home), env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
        if proc.returncode != 0 or "usage:" not in proc.stdout:
            wrong.append("%s: %s\n  %s" % (where, cmd, proc.stdout.strip()[-300:]))
    assert not wrong, "\n".join(wrong)


def _section(path, heading):
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    start = text.index("\n## %s\n" % heading)
    end = text.find("\n## ", start + 4)
    return " ".join(text[start:end if end >= 0 else len(text)].split())


def test_the_uninstall_pages_name_everything_the_hook_leaves_behind():
    """docs/deploy.md's Uninstall and docs/operations.md's Removing the hook list what stays once the stack is
    gone, for a person to remove: every Lease, node label and annotation, node pool tag and node unit the
    product writes is named there (from the code's own constants), so a thing added later (the alert marks'
    Lease, an auto pool's annotations) cannot go unlisted. The autoscaler tags matter most: left on a pool,
    the cluster-autoscaler keeps adding nodes for MIG pods that no node will serve."""
    from functions.decision import alert_marks, autoscaler_tags, budget, coalesce, run_record, waves
    from node_bootstrap.host import bootunit, holdersunit
    from node_bootstrap.kube import nodelabels

    left = {
        "Leases": [run_record.RECORD_LEASE, alert_marks.MARK_LEASE, budget.LEASE_PREFIX, coalesce.LEASE_PREFIX],
        "node labels": [nodelabels.STATE_LABEL, nodelabels.SEQUENCE_LABEL],
        "node annotations": [nodelabels.REASON_ANNOTATION, nodelabels.LAYOUTS_ANNOTATION,
                             nodelabels.HOLDERS_ANNOTATION, waves.PROGRESS_ANNOTATION],
        "node pool tags": [autoscaler_tags.TEMPLATE_RESOURCE],
        "node units": [bootunit.UNIT_NAME] + sorted({n.rsplit(".", 1)[0] for n in holdersunit.NAMES}),
    }
    wrong = []
    for path, heading in (("docs/deploy.md", "Uninstall"), ("docs/operations.md", "Removing the hook")):
        text = _section(path, heading)
        wrong += ["%s (%s): %s" % (path, kind, name) for kind, names in left.items() for name in names
                  if name not in text]
    assert not wrong, "not named where the pages say what stays:\n" + "\n".join(wrong)
