"""``ack-mig-hook profiles`` and ``ack-mig-hook plan``: the MIG core on the command line."""

import json

from node_bootstrap.mig import MEMORY_CONFIRMED, find_gpu, plan, render, spec_from_args


def configure(parser, command):
    parser.add_argument("--gpu", required=True,
                        help="NVML product name ('NVIDIA A100-SXM4-40GB'), ACK's hyphenated form, or PCI id")
    if command == "plan":
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--size", metavar="VALUE", help="one profile name or id: as many as fit")
        group.add_argument("--sequence", metavar="VALUE", help="hyphen-separated profile names or ids")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args):
    gpu = find_gpu(args.gpu)
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
    layout = plan(spec_from_args(args.size, args.sequence), gpu)
    if args.json:
        print(json.dumps(layout.to_dict(), indent=2))
    else:
        print(render(layout))
    return 0
