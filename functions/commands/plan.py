"""``ack-mig-hook profiles`` and ``ack-mig-hook plan``: the MIG core on the command line.

``plan --instance-type`` takes the GPU model and count from the ECS family table (functions/decision/families.py)
and adds what one node of that type advertises (``nvidia.com/mig-*``) and the node pool tags that tell
ACK's cluster-autoscaler so (functions/decision/autoscaler_tags.py).
"""

import json

from node_bootstrap.mig import (MEMORY_CONFIRMED, SEQUENCE_LABEL, SIZE_LABEL, find_gpu, layout_resources, parse, plan,
                                render, resolve_gpu, spec_from_args)


class InstanceTypeError(ValueError):
    """``--instance-type`` names no ECS type whose GPUs and their count the family table knows. Exit 2."""

    exit_code = 2


def configure(parser, command):
    gpu_help = ("a model as people say it (A100-80GB, H100-80GB, H800, A800, H20, H200; case-insensitive, a name "
                "that fits several models lists them), an NVML product name, ACK's hyphenated form, or a PCI id")
    if command == "plan":
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--gpu", help=gpu_help)
        which.add_argument("--instance-type", metavar="TYPE",
                           help="an ECS instance type (ecs.ebmgn7.26xlarge): its GPU model and count from the "
                                "family table; adds the node's MIG resources and the autoscaler tags")
    else:
        parser.add_argument("--gpu", required=True, help=gpu_help)
    if command == "plan":
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--size", metavar="VALUE", help="one profile name or id: as many as fit")
        group.add_argument("--sequence", metavar="VALUE", help="hyphen-separated profile names or ids")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _instance_type(text):
    """(GPU model, GPUs per node) of an ECS instance type, or InstanceTypeError naming why not."""
    from functions.decision.families import capability

    cap = capability(text)
    if cap.mig is not True:
        raise InstanceTypeError("%s; --instance-type takes an ECS bare metal type with MIG GPUs, e.g. "
                                "ecs.ebmgn7.26xlarge" % cap.reason)
    if not cap.gpus or not cap.gpu_model:
        raise InstanceTypeError("the family table does not know how many GPUs %s has; use --gpu for the layout "
                                "of one GPU" % text.strip()[:60])
    return find_gpu(cap.gpu_model), cap.gpus


def _node(args, spec, layout, gpus):
    from functions.decision.autoscaler_tags import autoscaler_tags

    resources = layout_resources(layout, gpus)
    tags = autoscaler_tags(resources)
    if args.json:
        out = layout.to_dict()
        out.update({"instance_type": args.instance_type.strip().lower(), "gpus": gpus, "node_resources": resources,
                    "autoscaler_tags": tags, "label": label_line(spec, layout.gpu)})
        print(json.dumps(out, indent=2))
        return 0
    print(render(layout))
    print("pool label: %s" % label_line(spec, layout.gpu))
    print("node %s: %d x %s" % (args.instance_type.strip().lower(), gpus, layout.gpu.name))
    print("  node resources: %s" % ", ".join("%s=%d" % kv for kv in resources.items()))
    print("  autoscaler tags (the node pool's scaling_group.tags, ACK_MIG_AUTOSCALER_TAGS):")
    for key, value in tags.items():
        print("    %s: %s" % (key, value))
    return 0


def run(args):
    if getattr(args, "instance_type", None) is not None:  # '' too: it is refused by name, not ignored
        gpu, gpus = _instance_type(args.instance_type)
        spec = spec_from_args(args.size, args.sequence)
        return _node(args, spec, plan(spec, gpu), gpus)
    gpu = resolve_gpu(args.gpu)
    if args.command == "profiles":
        if args.json:
            print(json.dumps([p.to_dict() for p in gpu.profiles], indent=2))
        else:
            print("%s (%s): %d memory slots, %d compute slices, %d MiB"
                  % (gpu.name, gpu.key, gpu.memory_slots, gpu.compute_slices, gpu.memory_mib))
            width = max(len(p.name) for p in gpu.profiles)  # "1g.24gb+me.all" is longer than most
            print("  %-*s %4s %8s %7s %9s %4s  %s" % (width, "profile", "id", "compute", "memory", "MiB", "max",
                                                    "starts (size)"))
            for p in gpu.profiles:
                starts = ",".join(str(x.start) for x in p.placements)
                print("  %-*s %4d %8d %7d %9d %4d  %s (%d)" % (width, p.name, p.id, p.compute_slices,
                                                            p.memory_slices, p.memory_mib, p.max_instances,
                                                            starts, p.placements[0].size))
            if gpu.key not in MEMORY_CONFIRMED:
                print("  MiB: estimated, not read from a real GPU of this model; a node uses what its driver reports")
        return 0
    spec = spec_from_args(args.size, args.sequence)
    layout = plan(spec, gpu)
    label = label_line(spec, gpu)
    if args.json:
        out = layout.to_dict()
        out["label"] = label
        print(json.dumps(out, indent=2))
    else:
        print(render(layout))
        print("pool label: %s" % label)
    return 0


def label_line(spec, gpu):
    """The node pool label that asks for this layout, as a label can hold it: Kubernetes label values take
    no ``+``, so ``1g.10gb+me`` is written ``1g.10gb.me`` (node_bootstrap/mig/labels.py reads it back)."""
    request = parse(spec, gpu)
    value = "-".join(p.name.replace("+", ".") for p in request.profiles)
    return "%s=%s" % (SIZE_LABEL if request.fill else SEQUENCE_LABEL, value)
