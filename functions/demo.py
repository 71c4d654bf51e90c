"""``ack-mig-hook demo``: the bundled examples. Until delivery lands this shows ``plan`` on the guide's
labels; the delivery work replaces it with the full event -> node path on simulated nodes."""

from node_bootstrap.mig import find_gpu, plan, render, PartitionSpec

EXAMPLES = (
    ("NVIDIA A100-SXM4-40GB", "size", "1g.5gb"),
    ("NVIDIA A100-SXM4-40GB", "sequence", "3g.20gb-3g.20gb"),
    ("NVIDIA A100-SXM4-40GB", "sequence", "1g.5gb-2g.10gb-3g.20gb"),
    ("NVIDIA H200", "sequence", "9-14-19-19"),
)


def configure(parser, command):
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args):
    import json

    layouts = []
    for gpu_name, kind, value in EXAMPLES:
        layout = plan(PartitionSpec(kind, value), find_gpu(gpu_name))
        layouts.append(layout)
        if not args.json:
            print("ack.aliyun.com/gpu-partition-%s=%s" % (kind, value))
            print(render(layout))
            print()
    if args.json:
        print(json.dumps([layout.to_dict() for layout in layouts]))
    return 0
