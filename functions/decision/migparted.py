"""Between NVIDIA mig-parted configs and this hook's pool labels. Pure: documents in, results out.

A mig-parted config (the GPU Operator's mig-manager reads the same format)::

    version: v1
    mig-configs:
      <name>:
        - devices: all            # or a list of GPU indexes
          device-filter: [...]    # optional: PCI ids (0x20B010DE) the entry applies to
          mig-enabled: true
          mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}

One pool label gives every GPU of a node the same layout, so a config converts only when, for each
device filter, all its entries give the same layout. Refused, with the reason: different layouts for
different GPUs of a node, a layout for some GPUs only, MIG off (that is removing the label), MIG on
with no instances, a layout that does not fit the GPU (when the GPU is known: ``--gpu`` or a device
filter of one catalogue model), a label value over the 63 characters Kubernetes allows.

``+me`` profiles: a label value cannot hold ``+``, so they are written as their NVML id, which needs the
GPU model.
"""

from collections import Counter
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from node_bootstrap.mig import (SEQUENCE_LABEL, SIZE_LABEL, GpuModel, MigInputError, PartitionSpec,
                                find_gpu, plan, resolve_profile)
from node_bootstrap.outside import digits, json_type

MAX_LABEL_VALUE = 63  # Kubernetes label values


class ConvertError(ValueError):
    """The input cannot be converted at all (not a mig-parted config, unknown config name). Exit 2."""

    exit_code = 2


class Converted(NamedTuple):
    """One config (and device filter) as a pool label, or refused with ``reason``."""

    config: str
    device_filter: Tuple[str, ...]  # () when the entries have none
    label: str  # SEQUENCE_LABEL, or "" when refused
    value: str
    reason: str  # why refused; "" when converted

    def to_dict(self) -> Dict[str, Any]:
        return {"config": self.config, "device_filter": list(self.device_filter), "label": self.label or None,
                "value": self.value or None, "refused": self.reason or None}


def _filters(entry: Mapping[str, Any]) -> Tuple[str, ...]:
    """The entry's PCI device ids. Text or a list of text, as mig-parted reads it (api/spec/v1/spec.go,
    MigConfigSpec.UnmarshalJSON); anything else is a ConvertError: YAML reads an unquoted 0x20B010DE as a number,
    which str() showed in decimal, matched no GPU and so let the layout through unchecked."""
    value = entry.get("device-filter")
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    odd = next((v for v in items if not isinstance(v, str)), None)
    if odd is not None:
        shown = "a list holding %s" % json_type(odd) if isinstance(value, list) else json_type(odd)
        raise ConvertError("device-filter is %s; write a PCI device id as text in quotes (device-filter: "
                           "\"0x20B010DE\") or a list of them" % shown)
    return tuple(sorted(v.strip().lower() for v in items))


def _gpu_of(filters: Tuple[str, ...], gpu: Optional[GpuModel]) -> Optional[GpuModel]:
    """The GPU model: --gpu, else the one catalogue model every PCI id of the filter names."""
    if gpu is not None or not filters:
        return gpu
    models = []
    for f in filters:
        try:
            models.append(find_gpu(f))
        except MigInputError:
            return None
    return models[0] if len({m.key for m in models}) == 1 else None


MAX_COUNT = 7  # the most instances any GPU holds (seven 1g slices): a count above it fits no GPU


def _shown(value: Any, limit: int = 60) -> str:
    """A value from the file as a message shows it: bounded (an anchor-expanded list can be gigabytes), any other
    type named in json_type's words, as every reader names it."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        text = repr(value)
        return text if len(text) <= limit else text[:limit] + "..."
    return json_type(value)


def _devices(entry: Mapping[str, Any]) -> str:
    value = entry.get("devices")
    if value == "all":
        return "all"
    if isinstance(value, list) and len(value) <= 16 and all(isinstance(v, int) and not isinstance(v, bool)
                                                            for v in value):
        return repr(value)
    return _shown(value)


def _layout(entry: Mapping[str, Any]) -> Tuple[bool, Tuple[Tuple[str, int], ...]]:
    devices = entry.get("mig-devices") or {}
    if not isinstance(devices, dict):
        raise ConvertError("mig-devices must map profile names to counts, got %s" % json_type(devices))
    counts = []
    for name, count in devices.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ConvertError("mig-devices %s: the count must be a whole number from 0 to %d, got %s"
                               % (_shown(name), MAX_COUNT, _shown(count)))
        if count > MAX_COUNT:
            raise ConvertError("mig-devices %s: count %s is more than a GPU holds (at most %d)"
                               % (_shown(name), _shown(count), MAX_COUNT))
        if count:
            counts.append((str(name).strip().lower(), count))
    return bool(entry.get("mig-enabled")), tuple(sorted(counts))


def _sort_key(name: str) -> Tuple[int, str]:
    slices = digits(name.split("g.", 1)[0])  # (a config's name: int of 5,000 digits would raise ValueError)
    return (-slices if slices is not None else 0, name)


def _one(config: str, filters: Tuple[str, ...], entries: List[Mapping[str, Any]],
         gpu: Optional[GpuModel]) -> Converted:
    def refuse(reason: str) -> Converted:
        return Converted(config, filters, "", "", reason)

    try:
        layouts = {_layout(e) for e in entries}
    except ConvertError as exc:
        return refuse(str(exc))
    if len(layouts) > 1:
        return refuse("its entries give GPUs %s different layouts; one pool label gives every GPU of a node "
                      "the same layout (use one node pool per layout)" % " and ".join(_devices(e) for e in entries))
    if len(entries) == 1 and entries[0].get("devices") != "all":
        return refuse("it partitions devices %s only; a pool label partitions every GPU of the node"
                      % _devices(entries[0]))
    enabled, counts = layouts.pop()
    if not enabled:
        return refuse("it turns MIG off; for that remove the pool's partition label (with "
                      "ACK_MIG_ON_LABEL_REMOVAL=disable the nodes roll to MIG off)")
    if not counts:
        return refuse("it enables MIG with no instances; a pool label always asks for instances")
    names = sorted((n for n, c in counts for _ in range(c)), key=_sort_key)
    model = _gpu_of(filters, gpu)
    if model is not None:
        try:
            ids = [resolve_profile(model, n) for n in names]
            plan(PartitionSpec("sequence", "-".join(names)), model)
        except MigInputError as exc:
            return refuse("on %s: %s" % (model.key, exc))
        if any("+" in n for n in names) or len("-".join(names)) > MAX_LABEL_VALUE:
            names = [str(p.id) for p in ids]  # label values hold neither "+" nor more than 63 characters
    elif any("+" in n for n in names):
        return refuse("+me profiles go into a label as NVML ids, which depend on the GPU: give --gpu")
    value = "-".join(names)
    if len(value) > MAX_LABEL_VALUE:
        return refuse("the label value would be %d characters; Kubernetes allows %d (give --gpu to write ids)"
                      % (len(value), MAX_LABEL_VALUE))
    return Converted(config, filters, SEQUENCE_LABEL, value, "")


def from_mig_parted(doc: Any, config: Optional[str] = None, gpu: Optional[GpuModel] = None) -> List[Converted]:
    """Every config of the document (or the one named), each per device filter, converted or refused."""
    if not isinstance(doc, dict) or not isinstance(doc.get("mig-configs"), dict):
        raise ConvertError("not a mig-parted config: expected {version: v1, mig-configs: {NAME: [...]}}")
    if str(doc.get("version", "v1")) != "v1":
        raise ConvertError("mig-parted config version %r is not supported; v1 is" % str(doc.get("version"))[:20])
    configs = doc["mig-configs"]
    # YAML reads an unquoted 1, true or null as a number, boolean or null: the names are sorted and listed as text
    untyped = [k for k in configs if not isinstance(k, str)]
    if untyped:
        raise ConvertError("mig-configs: a config name is %s, not text; write such a name in quotes ('1': [...])"
                           % _shown(untyped[0]))
    if config is not None and config not in configs:
        raise ConvertError("no config %r; the file has: %s" % (config[:60], ", ".join(sorted(configs)) or "none"))
    out = []
    for name in [config] if config is not None else sorted(configs):
        entries = configs[name]
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
            out.append(Converted(name, (), "", "", "its value must be a list of {devices, mig-enabled, "
                                                   "mig-devices} entries"))
            continue
        groups: Dict[Tuple[str, ...], List[Mapping[str, Any]]] = {}
        try:
            for entry in entries:
                groups.setdefault(_filters(entry), []).append(entry)
        except ConvertError as exc:  # this config alone: the others convert
            out.append(Converted(name, (), "", "", str(exc)))
            continue
        for filters, members in sorted(groups.items()):
            out.append(_one(name, filters, members, gpu))
    return out


def to_mig_parted(spec: PartitionSpec, gpu: GpuModel, name: Optional[str] = None) -> Dict[str, Any]:
    """A mig-parted config giving every GPU the layout ``spec`` asks for on ``gpu`` (checked by the solver)."""
    layout = plan(spec, gpu)
    counts = Counter(i.profile.name for i in layout.instances)
    config = name or "ack-" + layout.sequence.replace("+", ".")
    return {"version": "v1", "mig-configs": {config: [
        {"devices": "all", "mig-enabled": True,
         "mig-devices": {p: counts[p] for p in sorted(counts, key=_sort_key)}}]}}


def render_mig_parted(doc: Mapping[str, Any]) -> str:
    """The config as block YAML, mig-parted's own layout (names and profiles as JSON strings, which YAML
    reads as double-quoted scalars), with no YAML library."""
    import json

    lines = ["version: %s" % doc["version"], "mig-configs:"]
    for name, entries in doc["mig-configs"].items():
        lines.append("  %s:" % json.dumps(name))
        for e in entries:
            lines += ["    - devices: %s" % e["devices"], "      mig-enabled: %s" % str(e["mig-enabled"]).lower(),
                      "      mig-devices:"]
            lines += ["        %s: %d" % (json.dumps(p), n) for p, n in e["mig-devices"].items()]
    return "\n".join(lines) + "\n"


def labels_for(kind: str) -> str:
    return SIZE_LABEL if kind == "size" else SEQUENCE_LABEL


def render_results(results: Sequence[Converted]) -> List[str]:
    lines = []
    for r in results:
        where = r.config + (" [device-filter %s]" % ",".join(r.device_filter) if r.device_filter else "")
        lines.append("%s: %s=%s" % (where, r.label, r.value) if not r.reason else "%s: refused: %s" % (where, r.reason))
    return lines
