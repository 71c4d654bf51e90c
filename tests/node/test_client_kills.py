"""The GPU's clients under a kill at each of their writes: the stopped-clients note, each systemctl stop or
start, each manifest move. The next run's stop must leave every client stopped before it changes the GPUs,
and its start bring every one back with the note empty (host/clients.py)."""

import os

from node_bootstrap.commands.simhost import SimSystemd
from node_bootstrap.host import clients as clients_module
from node_bootstrap.host.clients import ClientControl, _move_file, parse_clients
from node_bootstrap.host.jsonfile import write_json
from tests.support.kills import KillAfter, Killed


class Killer(KillAfter):
    """Counts the clients' writes and raises Killed right after the k-th; reads (is-active) go through."""

    def __init__(self, k, systemd):
        super(Killer, self).__init__(k)
        self.systemd = systemd

    def move_file(self, src, dst):
        """Every manifest move, whichever way it goes (a rename, or the synced copy across file systems): counting
        shutil.move stopped seeing them once the moves became renames, and the matrix lost their kill points."""
        _move_file(src, dst)
        self.count("move %s" % os.path.basename(dst))

    def write_json(self, path, doc, **dump_args):
        write_json(path, doc, **dump_args)
        self.count("note %s" % doc)

    def run(self, argv):
        out = self.systemd.run(argv)
        if "is-active" not in argv:
            self.count(" ".join(argv[1:]))
        return out


def test_a_run_killed_after_any_client_write_leaves_the_next_run_stopping_and_starting_every_client(
        tmp_path, monkeypatch):
    """A client the note names may run all the same: a run killed between the note and `systemctl stop` never
    stopped it, one killed after starting it again and before the note said so left it running. The next run's
    stop skipped every client the note named, so it changed the GPUs under a running dcgm-exporter (which
    holds them: the reset fails) or a device plugin the kubelet still ran."""
    points = []
    for k in range(1, 30):
        host = tmp_path / str(k)
        manifest = host / "etc/kubernetes/manifests/nvidia-device-plugin.yml"
        manifest.parent.mkdir(parents=True)
        manifest.write_text("kind: Pod\n")
        systemd = SimSystemd(str(host))
        state = systemd.load()
        state["units"]["dcgm-exporter.service"] = "active"
        systemd.save(state)
        wanted = parse_clients("systemd:dcgm-exporter.service,manifest:%s" % manifest)
        state_dir = str(host / "var/lib/ack-mig-hook")
        killer = Killer(k, systemd)
        with monkeypatch.context() as patch:
            patch.setattr(clients_module, "write_json", killer.write_json)
            patch.setattr(clients_module, "_move_file", killer.move_file)
            first = ClientControl(wanted, killer.run, state_dir, lambda line: None)
            try:
                first.start(first.stop())
                break  # the whole stop and start ran: every write has been a kill point
            except Killed:
                points.append(killer.calls[-1])
        rerun = ClientControl(wanted, systemd.run, state_dir, lambda line: None)
        stopped = rerun.stop()
        # what the next run changes, it changes with no client running
        assert systemd.load()["units"]["dcgm-exporter.service"] != "active", points[-1]
        assert not manifest.exists(), points[-1]
        assert sorted(map(str, stopped)) == sorted(map(str, wanted)), points[-1]
        assert rerun.start(stopped) == [], points[-1]
        assert systemd.load()["units"]["dcgm-exporter.service"] == "active", points[-1]
        assert manifest.read_text() == "kind: Pod\n" and rerun.leftovers() == [], points[-1]
    steps = " | ".join(points)
    for expected in ("stop dcgm-exporter.service", "start dcgm-exporter.service", "move nvidia-device-plugin.yml"):
        assert expected in steps, (expected, steps)
    assert len(points) == 8, steps  # stop: note, stop, note, move; start: start, note, move, note
