"""The GPU's clients: stopped before MIG changes, started again afterwards, repaired after a crash.

A client is named ``systemd:UNIT`` (stopped with ``systemctl stop`` only when active) or
``manifest:PATH`` (a kubelet static pod: its manifest is moved to the state directory, so the kubelet
stops the pod, and moved back, so the kubelet starts it again; ACK runs its device plugin this way).
What was stopped is recorded in ``<state-dir>/stopped-clients.json`` before it is stopped, so a run
killed in between leaves a note the next run acts on: it starts those clients again at its end.

At boot a unit is only queued (``systemctl --no-block start``: the clients are ordered after the boot unit,
whose run would wait for itself), so its start fails, if it does, after the boot run has ended and said
nothing. Such a unit goes into ``<state-dir>/queued-clients.json``; the next run that is not a boot run
looks at it first (:meth:`ClientControl.check_queued`): one not active is a problem of that run, and a
client it starts again at its end.
"""

import errno
import os
import re
import shutil
import stat
import typing
from typing import Callable, Dict, List, Optional, Tuple

from ..errors import BadInput, NodeFailure, one_line
from ..localfile import describe, make_dirs
from .jsonfile import read_json, write_json

DEFAULT_CLIENTS = ("manifest:/etc/kubernetes/manifests/nvidia-device-plugin.yml", "systemd:dcgm-exporter",
                   "systemd:nvidia-dcgm")
MAX_RECORDED = 64  # clients a record names at most: a run has a few; more is no record of ours
_UNIT = re.compile(r"^[A-Za-z0-9@_.:\-]{1,200}\Z")

Runner = Callable[[List[str]], Tuple[int, str]]


class Client(typing.NamedTuple):
    kind: str  # "systemd" or "manifest"
    target: str  # unit name or absolute manifest path

    def __str__(self):
        # type: () -> str
        return "%s:%s" % (self.kind, self.target)


def parse_clients(text):
    # type: (str) -> List[Client]
    """``--clients`` value: comma-separated ``systemd:UNIT`` / ``manifest:/abs/path``; empty for none."""
    clients = []  # type: List[Client]
    for item in [x.strip() for x in text.split(",") if x.strip()]:
        kind, _, target = item.partition(":")
        client = _client(kind, target)
        if client is None:
            raise BadInput("bad --clients item %r; use systemd:UNIT or manifest:/absolute/path, comma-separated"
                           % item[:60])
        clients.append(client)
    if len(clients) > MAX_RECORDED:  # the record a stop writes is read back this far: more would be lost
        raise BadInput("--clients names %d clients; at most %d, comma-separated systemd:UNIT or "
                       "manifest:/absolute/path" % (len(clients), MAX_RECORDED))
    return clients


def _client(kind, target):
    # type: (object, object) -> Optional[Client]
    """The client ``kind:target`` names, or None when it is not one ``--clients`` accepts: a unit name that
    is no systemctl option, or an absolute manifest path of one line."""
    if not isinstance(kind, str) or not isinstance(target, str):
        return None
    if kind == "systemd" and _UNIT.match(target) and not target.startswith("-"):
        return Client(kind, target)
    if kind == "manifest" and target.startswith("/") and "\n" not in target and "\0" not in target and \
            len(target) <= 4096:
        return Client(kind, os.path.normpath(target))
    return None


def check_state_dir(state_dir):
    # type: (str) -> None
    """Refuse a state directory (or its held-manifests directory) that another user owns or others may write.
    Its records name the clients a run starts again and the manifests it moves back into place, as root: one
    that anybody could write let any local user plant a record and a "held" file that the next apply moved to
    any path (a cron.d entry). A directory that is not there yet is made private by the first write.

    The files in them are checked the same way and refused, never repaired: one another user owns or may
    write (a record made 0666 under umask 0 by an older run, reachable through a 0755 directory) may say
    anything already, and a chmod would only bless it."""
    for path in (state_dir, os.path.join(state_dir, "held-manifests")):
        try:
            info = os.stat(path)
        except OSError:
            continue  # not there (made private when written) or not reachable: the write says so
        if not stat.S_ISDIR(info.st_mode):
            continue  # a file where a directory goes: the first write names it (client-stop-failed)
        unsafe = _unsafe(info)
        if unsafe:
            raise NodeFailure("the state directory %s %s: the records in it say which clients a run starts and "
                              "which files it moves into place, so it must be writable by this user (uid %d) "
                              "alone; check what is in it, then %s, or pass --state-dir"
                              % (path, unsafe[0], os.geteuid(), unsafe[1]), code="state-dir-unsafe")
        for name in sorted(os.listdir(path)):
            inside = os.path.join(path, name)
            try:
                held = os.lstat(inside)  # a link itself: its target is what a move or a read would reach
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISDIR(held.st_mode):
                continue  # held-manifests, checked as a directory above
            # a link's own mode is always 0777 and means nothing: only who made it does
            unsafe = _unsafe(held, owner_only=stat.S_ISLNK(held.st_mode))
            if unsafe:
                raise NodeFailure("the state directory %s holds %s, which %s: what it says (the clients a run "
                                  "starts, the files it moves into place) may be anybody's; check it, then remove "
                                  "it or %s, or pass --state-dir" % (state_dir, inside, unsafe[0], unsafe[1]),
                                  code="state-dir-unsafe")


def _unsafe(info, owner_only=False):
    # type: (os.stat_result, bool) -> Optional[Tuple[str, str]]
    """(why, the fix) when another user owns the file or directory or others may write it; None otherwise."""
    if info.st_uid != os.geteuid():
        return "is owned by uid %d" % info.st_uid, "chown it"
    if not owner_only and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by others (mode %04o)" % stat.S_IMODE(info.st_mode), "chmod go-w it"
    return None


def make_private_dir(path):
    # type: (str) -> None
    """``path`` made if missing, 0700 whatever the umask (under umask 0 it was writable by everyone)."""
    make_dirs(path, 0o700)


def _hidden_copy(dst):
    # type: (str) -> str
    """Where a move across file systems writes its copy of ``dst`` before the rename."""
    return os.path.join(os.path.dirname(dst), "." + os.path.basename(dst) + ".tmp")


def _move_file(src, dst):
    # type: (str, str) -> None
    """``src`` renamed to ``dst`` itself. shutil.move onto a directory (or a link to one) moves into it: a
    directory found where a manifest is held aside took the manifest inside it, and moving that back put a
    directory at the manifest's path, from which the kubelet runs no pod (the device plugin gone for good,
    every run saying success)."""
    if os.path.isdir(dst):
        raise OSError(errno.EISDIR, "%s is a directory, not made by this tool: remove it" % dst)
    try:
        os.rename(src, dst)  # one mount of one file system: whole or not at all
        return
    except OSError as exc:
        # EXDEV: another file system, or another mount point of the same one (a bind mount: the devices agree,
        # rename(2) refuses all the same, and shutil.move's fallback was the copy in place below)
        if exc.errno != errno.EXDEV:
            raise
    # Another file system (the state directory on a disk of its own): shutil.move copied into ``dst`` itself,
    # unsynced, so a kill mid-copy left a half manifest there (the kubelet then runs no device plugin), or a
    # half held copy the next run moved back over the whole one. Copied beside it under a name the kubelet
    # skips (pkg/kubelet/config/file.go globs "[^.]*"), synced, renamed; the source goes only then.
    tmp = _hidden_copy(dst)
    if os.path.lexists(tmp):
        os.remove(tmp)  # a killed copy's leftover
    if os.path.islink(src):
        os.symlink(os.readlink(src), tmp)  # a link moves as itself, as rename moves it: what it names stays
    else:
        mode = stat.S_IMODE(os.stat(src).st_mode)
        with open(src, "rb") as source:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "wb") as copy:
                os.fchmod(copy.fileno(), mode)  # exactly the manifest's mode, whatever the umask
                shutil.copyfileobj(source, copy)
                copy.flush()
                os.fsync(copy.fileno())
    os.rename(tmp, dst)
    # The rename made durable before the source goes: each file system commits its own journal, and a power
    # loss that kept the removal but not the rename left the manifest under the hidden name alone.
    _sync_dir(os.path.dirname(dst))
    os.remove(src)


def _sync_dir(path):
    # type: (str) -> None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ClientControl(object):
    def __init__(self, clients, runner, state_dir, log, at_boot=False):
        # type: (List[Client], Runner, str, Callable[[str], None], bool) -> None
        self.clients = clients
        # At boot the units to start again are ordered after the boot unit (its Before=): a blocking start from
        # inside it would wait for the boot unit itself to end. --no-block queues the start instead.
        self.at_boot = at_boot
        self.run = runner
        self.state_dir = state_dir
        self.log = log
        self.record = os.path.join(state_dir, "stopped-clients.json")
        self.queued_record = os.path.join(state_dir, "queued-clients.json")
        self.held_dir = os.path.join(state_dir, "held-manifests")
        # Units whose start failed in this run, with what was said: a run starts its clients at the end of the
        # change and again on its way out, and a unit that fails slowly (systemd's start timeout) is waited for
        # once per run. It is tried again by the next run.
        self.start_failed = {}  # type: Dict[Client, str]

    def _held_path(self, client):
        # type: (Client) -> str
        return os.path.join(self.held_dir, client.target.strip("/").replace("/", "__"))

    def _load(self, path=None):
        # type: (str) -> List[Client]
        """The clients a record names. A record that is no list, and an entry that is not a pair naming a
        client ``--clients`` would accept (a unit that is a systemctl option, a relative path, a number, an
        object), is nothing this tool wrote: read as absent, each entry alone, so one bad entry neither
        fails the run nor drops the clients the others name."""
        doc = read_json(path or self.record)
        out = []  # type: List[Client]
        for item in (doc if isinstance(doc, list) else [])[:MAX_RECORDED]:
            client = _client(*item) if isinstance(item, list) and len(item) == 2 else None
            if client is not None and client not in out:
                out.append(client)
        return out

    def check_queued(self):
        # type: () -> List[str]
        """The units the last boot run queued: one not active now failed to start after that run (or was
        stopped since) and no one said so. Returns a problem line for each and records it as stopped, so this
        run starts it again at its end and says whether that worked. At boot the note is the last boot's
        queue, of no meaning now: dropped."""
        queued = [c for c in self._load(self.queued_record) if c.kind == "systemd"]  # all a boot run queues
        if not queued:
            return []
        problems = []  # type: List[str]
        if not self.at_boot:
            stopped = self._load()
            down = []  # type: List[Tuple[Client, str]]
            for client in queued:
                rc, out = self.run(["systemctl", "is-active", client.target])
                if rc != 0:
                    down.append((client, one_line(out, 40) or "not active"))
            new = [c for c, _ in down if c not in stopped]
            # The record keeps the bound it is read back with (_note): what does not fit stays queued, looked at
            # again by the next run, after this one has started the record's clients and emptied it.
            later = new[MAX_RECORDED - len(stopped):]
            for client, state in down:
                problems.append("%s, queued to start at boot, is %s; %s" % (
                    client, state, "the stopped-clients record is full: the next run starts it" if client in later
                    else "starting it again"))
            try:
                if len(new) > len(later):
                    self._save(stopped + new[:len(new) - len(later)])  # first: a kill must not lose it
                if later:
                    write_json(self.queued_record, [[c.kind, c.target] for c in later])
                else:
                    os.remove(self.queued_record)
            except (IOError, OSError) as exc:  # said, never raised: the run's GPUs are what it is for
                problems.append("could not record the clients queued at boot: %s" % one_line(exc, 200))
            return problems
        try:
            os.remove(self.queued_record)
        except OSError:
            pass
        return problems

    def _save(self, stopped):
        # type: (List[Client]) -> None
        write_json(self.record, [[c.kind, c.target] for c in stopped])

    def _note(self, stopped, client):
        # type: (List[Client], Client) -> None
        """Record ``client`` as stopped before it is stopped, keeping the record within what is read back.

        A killed run's leftovers and this run's --clients (each at most MAX_RECORDED) can name more together:
        a note past the bound was dropped when read back, so a kill after that stop left the client down for
        good. Every client the record names is stopped by us (or may be): none is given up for a new one.
        The run stops nothing more and fails before any change; its way out starts them all again, so the
        next run finds the record empty."""
        if len(stopped) >= MAX_RECORDED:
            raise NodeFailure("%s was not stopped: %s already names %d clients this tool stopped (an earlier "
                              "run's, not all in this --clients), the most a record keeps; they are started "
                              "again now, then run again" % (client, self.record, len(stopped)),
                              code="too-many-clients")
        self._save(stopped + [client])  # first: a kill right after the stop must not lose it

    def leftovers(self):
        # type: () -> List[Client]
        """Clients a killed run stopped and never started again."""
        return self._load()

    def stop(self):
        # type: () -> List[Client]
        """Stop the configured clients that are running; returns them (plus any a killed run left)."""
        stopped = self._load()
        for client in self.clients:
            # A client the note names is to be started at the end, not known to be stopped now: a run killed
            # between the note and the stop never stopped it, one killed after starting it again and before the
            # note said so left it running, and a unit may have been restarted since. It is stopped like the
            # others when it runs; only the note is not written twice.
            noted = client in stopped
            try:
                if client.kind == "systemd":
                    rc, _ = self.run(["systemctl", "is-active", "--quiet", client.target])
                    if rc != 0:
                        continue
                    if not noted:
                        self._note(stopped, client)
                    rc, out = self.run(["systemctl", "stop", client.target])
                    if rc != 0:
                        self.log("could not stop %s: %s" % (client, out.strip()[:200]))
                else:
                    if not os.path.exists(client.target):
                        continue
                    make_private_dir(self.state_dir)
                    make_private_dir(self.held_dir)
                    if not noted:
                        self._note(stopped, client)
                    _move_file(client.target, self._held_path(client))
            except (IOError, OSError) as exc:
                # The state directory, its record or a held manifest's place is not what this tool wrote (a file
                # where the directory goes, a directory where a file goes): said in one line, naming it, before
                # any GPU change; the way out starts again whatever the record names. It was an internal error.
                raise NodeFailure("could not stop %s: %s; the GPUs were not changed" % (
                    client, one_line(exc, 1000)), code="client-stop-failed")
            if not noted:
                stopped.append(client)
            self.log("stopped %s" % (client,))
        return stopped

    def start(self, stopped):
        # type: (List[Client]) -> List[str]
        """Start what was stopped; returns problems (empty when all came back). A client that did not start
        stays in the stopped record, so every later run tries again."""
        problems = []  # type: List[str]
        remaining = list(stopped)
        for client in stopped:
            if client in self.start_failed:
                problems.append(self.start_failed[client])
                continue
            try:
                if client.kind == "systemd":
                    if self.at_boot:  # noted before it leaves the stopped record: the next run checks it
                        queued = self._load(self.queued_record)
                        write_json(self.queued_record, [[c.kind, c.target] for c in queued if c != client] +
                                   [[client.kind, client.target]])
                    rc, out = self.run(["systemctl"] + (["--no-block"] if self.at_boot else []) +
                                       ["start", client.target])
                    if rc != 0:
                        # It stays in the record, as for an IOError: the next run starts it again, and says so
                        # again, until it runs (dropped here, a unit this run stopped stayed down for good).
                        self.start_failed[client] = "could not start %s: %s" % (client, out.strip()[:200])
                        problems.append(self.start_failed[client])
                        continue
                else:
                    held = self._held_path(client)
                    mode = os.lstat(held).st_mode if os.path.lexists(held) else None
                    # what this tool held aside: a file, or the link a manifest was (rename moves the link
                    # itself; check_state_dir refuses one another user made), never more
                    if mode is not None and (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                        # gone meanwhile: made again writable by root alone, whatever the umask (os.makedirs
                        # under umask 0 gave a static pods' directory anyone could put a pod in)
                        make_dirs(os.path.dirname(client.target), 0o755)
                        _move_file(held, client.target)
                    elif mode is not None and not os.path.lexists(client.target):
                        raise OSError(errno.EEXIST, "%s is %s, not a manifest this tool held aside: put the manifest "
                                                    "back at %s and remove it" % (held, describe(mode), client.target))
                    # A hold killed between its copy and the rename left the copy (the manifest stayed in place):
                    # the next hold removes it, a run that holds nothing (a boot run at the layout there) never did.
                    # Only beside a manifest in place: a copy that is all there is stays for a person to look at.
                    if os.path.lexists(_hidden_copy(held)) and os.path.lexists(client.target):
                        os.remove(_hidden_copy(held))
            except (IOError, OSError) as exc:
                # Reported, never raised: a raise here would hide why apply failed and skip the label.
                # It stays in the record, so the next run tries again.
                # a path can be long: the line keeps what to do, at its end
                problems.append("could not start %s: %s" % (client, one_line(exc, 1000)))
                continue
            remaining.remove(client)
            try:
                self._save(remaining)
            except (IOError, OSError) as exc:
                problems.append("could not record %s as started: %s" % (client, exc))
            self.log("%s %s" % ("queued the start of" if self.at_boot and client.kind == "systemd" else "started",
                                client))
        return problems
