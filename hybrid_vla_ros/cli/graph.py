"""ROS graph commands: graph (start the three nodes), demo (graph + sample drive + report), schema."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .common import refuse_unless_default


def run_graph(args, refuse: list[str] = (), defaults: dict | None = None) -> int:
    """The three nodes from config/ (or --config), in one process or one process per node."""
    from ..ros.launch_support.bringup import graph_params, node_names, run_in_process, run_processes
    if refuse:
        refuse_unless_default(defaults, args, list(refuse), "to the ROS graph (set them in its parameter files)")
    nodes = node_names(getattr(args, "nodes", None) or "prefix,suffix,scheduler")
    if args.processes:
        return run_processes(args.config, getattr(args, "respawn_delay", 1.0), nodes)
    return run_in_process(graph_params(args.config), nodes=nodes, strict=True)


def cmd_demo(args) -> int:
    # A self-contained showcase: keep DDS discovery on this machine unless the user's environment says otherwise.
    if not args.graph_running:  # a graph that runs elsewhere may be on other computers
        os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    from ..report import key_value_table, pair, progress_printer
    from ..ros.demo import run_demo
    summary = run_demo(args.out, bag=args.bag, config=args.config, rate=args.rate,
                       storage=args.storage, processes=args.processes, progress=progress_printer("demo"),
                       graph_running=args.graph_running)
    changes = [pt for i, pt in enumerate(summary["partition_over_time"])
               if i == 0 or pt[1] != summary["partition_over_time"][i - 1][1]]
    print(f"demo: {summary['trajectories']}/{summary['frames_published']} frames of {summary['bag']} through the "
          f"graph ({summary['mode']}), model {summary['model']}")
    print(key_value_table([
        ("period p50 / p99", pair(summary["period_ms"])), ("latency p50 / p99", pair(summary["latency_ms"])),
        ("dropped", summary["dropped"]), ("transports", ", ".join(summary["transports"])),
        ("partition changes [s, p]", changes), ("rejected inputs", sum(int(v.get("rejected", 0)) for v in summary["rejected"].values())),
        ("driving", driving_line(summary["driving"])),
        ("trajectory bag", summary["trajectory_bag"]),
        ("report", f"{summary['report_png']}, {summary['driving']['drive_png']}, {Path(args.out) / 'summary.json'}")]))
    return 0 if summary["trajectories"] > 0 else 1


def driving_line(driving: dict) -> str:
    model, baseline = driving.get("model") or {}, driving.get("constant_velocity") or {}
    if not model.get("frames"):
        return "no ground truth in the bag (or map-frame output): not scored"
    return (f"ADE {model['ade_m']:.2f} m, FDE {model['fde_m']:.2f} m over {model['frames']} frames "
            f"(constant velocity: ADE {baseline['ade_m']:.2f} m)")


def rewrite_parameter_tables(doc_path: str) -> None:
    """Replace each node's table under '## Parameters of `<node>`' in a markdown file with the current one."""
    from ..ros.params import NODE_PARAMS, markdown_table
    text = Path(doc_path).read_text()
    for node in NODE_PARAMS:
        start = text.index("| name | type |", text.index(f"## Parameters of `{node}`"))
        end = text.index("\n\n", start) + 1
        text = text[:start] + markdown_table(node) + text[end:]
    Path(doc_path).write_text(text)


def cmd_schema(args) -> int:
    from ..ros.params import NODE_PARAMS, node_schema
    if args.docs:
        rewrite_parameter_tables(args.docs)
    for node in NODE_PARAMS:
        text = json.dumps(node_schema(node), indent=2) + "\n"
        if args.out:
            Path(args.out, f"{node}.schema.json").write_text(text)
        else:
            print(text)
    return 0


def register(sub) -> None:
    p = sub.add_parser("graph", help="start the three ROS 2 nodes (config/*.param.yaml, or --config)")
    p.add_argument("--config", default=None, help="one params YAML keyed by node name")
    p.add_argument("--processes", action="store_true", help="one process per node, each pinned to its cores")
    p.add_argument("--respawn-delay", type=float, default=1.0,
                   help="--processes: restart a node that died after this many seconds; negative: no respawn, "
                        "the graph ends with it (default 1.0)")
    p.add_argument("--nodes", default=None,
                   help="start only these nodes, e.g. prefix,scheduler on one computer and suffix on another "
                        "(default: all three)")
    p.set_defaults(func=run_graph)

    p = sub.add_parser("demo", help="graph + sample drive replay + trajectory bag + summary + PNG report")
    p.add_argument("--out", default="out/demo")
    p.add_argument("--bag", default=None, help="rosbag2 folder to replay (default: the shipped sample drive)")
    p.add_argument("--config", default=None)
    p.add_argument("--rate", type=float, default=0.0, help="0: as fast as the graph takes it; 1: recorded rate")
    p.add_argument("--storage", default="mcap", choices=("mcap", "sqlite3"))
    p.add_argument("--processes", action="store_true")
    p.add_argument("--graph-running", action="store_true",
                   help="drive a graph that is already running (e.g. `graph --nodes` on two computers); start "
                        "nothing; --config must be the graph's")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("schema", help="write the JSON schema of each node's parameters")
    p.add_argument("--out", default=None, help="directory (default: print)")
    p.add_argument("--docs", default=None, help="also rewrite the parameter tables of this markdown file "
                                                  "(docs/INTERFACES.md)")
    p.set_defaults(func=cmd_schema)
