"""Ask for a reboot at most once per request: a reboot that did not help is a failure, not a loop.

``reboot-required`` means "the reboot finishes the job" (Ampere keeps a pending MIG mode in its InfoROM
and comes back with it current). A GPU that keeps neither the mode over a reboot nor can activate it
without one (Hopper and later passed through to a VM: nvmlDeviceSetMigMode answers RESET_REQUIRED, and
the mode is gone after the reboot) would otherwise send the node round forever: the boot unit applies,
the mode is pending again, ``rebooting`` again. So when apply ends ``reboot-required`` it records the
boot it asked in (``<state-dir>/reboot-requested.json``: the boot id and the request); if a later
apply of the same request, in a later boot, ends ``reboot-required`` again, the reboot did not apply
the change and another one will not either: the outcome becomes ``failed`` (``reboot-ineffective``)
with the reason. A success clears the record. NVIDIA's own mig-manager service has the same failsafe
(mig-parted deployments/systemd/service.sh: "The reboot will only occur once. If the MIG mode is still
not applied after reboot, this script will error out.").

The boot id is the kernel's (``/proc/sys/kernel/random/boot_id``, new at every boot); a simulated
node's is its reboot counter.
"""

import os
from typing import Any, Dict, Optional

from ..errors import OUTCOME_REBOOT, NodeFailure
from .jsonfile import read_json, write_json

RECORD = "reboot-requested.json"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def kernel_boot_id(path=BOOT_ID_PATH):
    # type: (str) -> Optional[str]
    try:
        with open(path) as fh:
            return fh.read().strip() or None
    except (IOError, OSError):
        return None


class RebootGuard(object):
    def __init__(self, state_dir, boot_id, request):
        # type: (str, Optional[str], Dict[str, Any]) -> None
        self.path = os.path.join(state_dir, RECORD)
        self.boot_id = boot_id
        self.request = request

    def _load(self):
        # type: () -> Optional[Dict[str, Any]]
        record = read_json(self.path)
        return record if isinstance(record, dict) else None

    def review(self, failure):
        # type: (NodeFailure) -> NodeFailure
        """The failure to report: ``failure`` itself, or ``reboot-ineffective`` when a reboot already
        asked for the same request did not apply it. Records a new reboot request."""
        if failure.outcome != OUTCOME_REBOOT or self.boot_id is None:
            return failure
        record = self._load()
        if record and record.get("request") == self.request and record.get("boot_id") != self.boot_id:
            return NodeFailure("%s; but the node already rebooted for this request and the change is still not "
                               "applied: another reboot will not apply it (a GPU that neither keeps MIG mode over "
                               "a reboot nor can be reset, such as Hopper passed through to a VM); enable MIG mode "
                               "where a GPU reset is possible (bare metal, or from the hypervisor)"
                               % failure.message.rstrip("."), code="reboot-ineffective")
        if not (record and record.get("request") == self.request):
            self._save({"boot_id": self.boot_id, "request": self.request})
        return failure

    def _save(self, record):
        # type: (Dict[str, Any]) -> None
        try:
            write_json(self.path, record)  # fsynced: written just before the node reboots, it must survive that
        except (IOError, OSError):
            pass  # without the record the guard cannot help next time; the outcome itself stands

    def clear(self):
        # type: () -> None
        try:
            os.unlink(self.path)
        except OSError:
            pass
