"""Start the three nodes without `ros2 launch`: in one process (one executor, zero-copy handover) or as
separate processes (the suffix process pinned to its cores). Also the `ros2 run` entry points."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from ... import stop
from ...engine.cpu import allowed_cores, check_allowed, default_stage_cores
from ...errors import ConfigError, expect
from ..params import NODE_PARAMS, chosen_cores, load_node_params
from .session import executor_with, graph_executor, ros_context, spin_ready, spin_until_stopped
from .supervise import Supervisor, stop_processes  # noqa: F401 (stop_processes: the demo's)
from ..topics import NODES, REMAPS, STANDBY_NODE, STANDBY_REMAPS

SHORT = {"prefix": "hybrid_vla_prefix", "suffix": "hybrid_vla_suffix", "scheduler": "hybrid_vla_scheduler"}

GIL_SWITCH_INTERVAL_S = 0.0005


def tune_interpreter() -> None:
    """Stage workers need the GIL back quickly between torch ops while executor threads run Python: with
    the default 5 ms switch interval a busy executor stretched a 130 ms prefix to 0.5-2.2 s here."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def config_dir() -> Path:
    """The package's config/: the ament share directory on a ROS install, else the source tree."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
        try:
            shared = Path(get_package_share_directory("hybrid_vla_ros")) / "config"
            if shared.is_dir():
                return shared
        except (PackageNotFoundError, OSError):  # OSError: no AMENT_PREFIX_PATH (pip install)
            pass
    except ImportError:
        pass
    return Path(__file__).resolve().parents[3] / "config"


def graph_params(config: str | None = None, overrides: dict | None = None,
                 node_files: dict[str, str] | None = None) -> dict[str, dict]:
    """node -> flat parameter values, from a combined YAML (keys = node names), or per-node files
    (`node_files`, default: the package's config/<node>.param.yaml)."""
    params = {}
    for node in NODES:
        source = config or (node_files or {}).get(node) or str(config_dir() / f"{node}.param.yaml")
        params[node] = load_node_params(source, node)
        params[node].update((overrides or {}).get(node, {}))
    prefix, suffix = params["hybrid_vla_prefix"], params["hybrid_vla_suffix"]
    if not chosen_cores(prefix["cores"]) and not chosen_cores(suffix["cores"]) and suffix["numa_node"] < 0 \
            and len(allowed_cores()) >= 2:
        # Disjoint core sets by default (the nodes' own default, resolved here once so that children pinned
        # with --pin get the same split): without a GPU this is the stand-in for "GPU + CPU".
        prefix["cores"], suffix["cores"] = default_stage_cores(0), default_stage_cores(1)
    return params


def write_combined_config(params: dict[str, dict], path: str | Path) -> Path:
    """node -> flat values  ->  one ROS params YAML keyed by node name (nested dotted names)."""
    import yaml
    doc = {}
    for node, values in params.items():
        nested: dict = {}
        for name, value in values.items():
            target = nested
            *heads, last = name.split(".")
            for head in heads:
                target = target.setdefault(head, {})
            target[last] = value
        doc[node] = {"ros__parameters": nested}
    class NoAliases(yaml.SafeDumper):   # rcl refuses YAML aliases ("Will not support aliasing"): values shared
        def ignore_aliases(self, data):  # between nodes are written out each time
            return True
    Path(path).write_text(yaml.dump(doc, Dumper=NoAliases, sort_keys=False))
    return Path(path)


def to_ros_parameters(node: str, values: dict):
    from rclpy.parameter import Parameter
    from ..nodes.parameters import PARAM_TYPES
    specs = {p.name: p for p in NODE_PARAMS[node]}
    return [Parameter(name, PARAM_TYPES[specs[name].type], value) if name in specs else Parameter(name, value=value)
            for name, value in values.items()]  # rclpy's own (use_sim_time, qos_overrides.*): typed by value


def remap_args(node: str, extra: dict | None = None) -> list[str]:
    """--ros-args remaps of `node`: the graph's (ros/topics.py), then `extra` {from: to} over them."""
    args = ["--ros-args"]
    for src, dst in {**REMAPS[node], **(extra or {})}.items():
        args += ["-r", f"{src}:={dst}"]
    return args


NODE_CLASSES = {"hybrid_vla_prefix": "PrefixNode", "hybrid_vla_suffix": "SuffixNode",
                "hybrid_vla_scheduler": "SchedulerNode"}


def node_class(node: str):
    from ..nodes import prefix_node, scheduler_node, suffix_node
    modules = {"hybrid_vla_prefix": prefix_node, "hybrid_vla_suffix": suffix_node, "hybrid_vla_scheduler": scheduler_node}
    return getattr(modules[node], NODE_CLASSES[node])


def make_node(node: str, values: dict, context=None, remaps: dict | None = None, name: str | None = None):
    """name: another node name for the same node kind (the standby suffix: the suffix's topics and params)."""
    kwargs = {"node_name": name} if name else {}
    extra = {**STANDBY_REMAPS, **(remaps or {})} if name == STANDBY_NODE else remaps
    return node_class(node)(context=context, cli_args=remap_args(node, extra),
                            parameter_overrides=to_ros_parameters(node, values), **kwargs)


class InProcessGraph:
    """The three nodes in one process on one single-threaded executor (stage compute runs on the nodes' own
    pinned worker threads; the executor thread only moves messages). A stop request during construction
    ends it early: `complete` then says so and `shutdown()` releases what was built."""

    def __init__(self, params: dict[str, dict], context=None, activate_scheduler: bool = True,
                 remaps: dict[str, dict] | None = None, nodes: tuple[str, ...] = NODES):
        from ..nodes.lifecycle import bring_up_all
        tune_interpreter()
        if not activate_scheduler:
            params = {**params, "hybrid_vla_scheduler": {**params["hybrid_vla_scheduler"], "autostart": False}}
        self.context, self.wanted = context, [n for n in NODES if n in nodes]
        self.nodes = {}
        self.failed: dict[str, str] = {}   # node -> why it did not come up (bring_up_all)
        self.executor = graph_executor(context)
        for node in self.wanted:  # prefix first: it places shared blocks before the suffix decides on copies
            if stop.requested():
                return
            self.nodes[node] = make_node(node, params[node], context, (remaps or {}).get(node))
            self.executor.add_node(self.nodes[node])
        if self.complete:  # the suffix listens before the prefix sends (in-process handles would wait)
            self.failed = bring_up_all(list(self.nodes.values()))

    @property
    def complete(self) -> bool:
        return len(self.nodes) == len(self.wanted)

    def spin_once(self, timeout_sec: float = 0.05) -> None:
        spin_ready(self.executor, timeout_sec)

    def shutdown(self) -> None:
        for n in self.nodes.values():
            self.executor.remove_node(n)
        self.executor.shutdown()  # first: it releases the entities its last wait holds (session.RELEASE_NOTE)
        for n in self.nodes.values():
            n.destroy_node()


def run_in_process(params: dict[str, dict], remaps: dict[str, dict] | None = None,
                   nodes: tuple[str, ...] = NODES, strict: bool = False) -> int:
    """The graph's nodes (all three, or those named) in this process until SIGINT/SIGTERM; exit code 0 on a
    requested stop. strict (`hybrid-vla graph`): a node that did not come up ends it (ConfigError, the reason);
    else (launch: respawned on exit) the nodes stay unconfigured, on their lifecycle services."""
    with ros_context() as context:
        graph = InProcessGraph(params, context=context, remaps=remaps, nodes=nodes)
        try:
            expect(not (strict and graph.failed), ConfigError,
                   "; ".join(f"{node} did not come up: {why}" for node, why in graph.failed.items()))
            spin_until_stopped(graph.executor)
        finally:
            graph.shutdown()
    return 0


def child_commands(config: str | None, nodes: tuple[str, ...] = NODES) -> dict[str, list[str]]:
    """node -> argv of its own process (all three nodes, or those named), each pinned to its cores before it
    starts. The parameters are resolved once here (default core split included) and every child gets the same
    resolved file."""
    import tempfile
    params = graph_params(config)
    for node in nodes:   # refused before any child starts (a child refused would be respawned)
        check_allowed(chosen_cores(params[node].get("cores", [])), f"{node}: cores")
    resolved = write_combined_config(params, Path(tempfile.mkdtemp(prefix="hvla_")) / "graph.param.yaml")
    commands = {}
    for node in (n for n in NODES if n in nodes):
        cmd = [sys.executable, "-m", "hybrid_vla_ros.ros.launch_support.bringup", "--node", node, "--config", str(resolved)]
        cores = chosen_cores(params[node].get("cores", []))
        if cores:
            cmd += ["--pin", ",".join(map(str, cores))]
        commands[node] = cmd
        if node == "hybrid_vla_suffix" and params[node].get("warm_standby"):  # its standby, on the same cores
            commands[STANDBY_NODE] = cmd + ["--name", STANDBY_NODE]
    return commands


def spawn_processes(config: str | None, env: dict | None = None) -> list[subprocess.Popen]:
    """One OS process per node (child_commands), started like the supervisor starts them but not watched
    (the demo's driver watches them itself)."""
    supervisor = Supervisor(child_commands(config), {**os.environ, **(env or {})})
    supervisor.start_all()
    return list(supervisor.procs.values())


def run_processes(config: str | None, respawn_delay_s: float = 1.0, nodes: tuple[str, ...] = NODES) -> int:
    """Parent of `--processes`: supervises one process per node until a stop request; a child that dies is
    restarted after respawn_delay_s (< 0: the graph ends instead). Exit code: the worst child's."""
    return Supervisor(child_commands(config, nodes), dict(os.environ), respawn_delay_s).run()


def node_names(text: str) -> tuple[str, ...]:
    """`prefix,scheduler` (short or full names) -> the graph's node names, in graph order."""
    wanted = {w.strip() for w in text.split(",") if w.strip()}
    full = {w if w in NODES else f"hybrid_vla_{w}" for w in wanted}
    expect(full and full <= set(NODES), ConfigError,
           f"--nodes {text!r}: expected a comma-separated subset of {', '.join(SHORT)}")
    return tuple(n for n in NODES if n in full)


def run_single_node(node: str, config: str | None, pin: list[int] | None, autostart: bool = True,
                    name: str | None = None) -> int:
    """Child of `--processes`: one node, its own process, until SIGINT/SIGTERM (exit code 0); os.EX_CONFIG (78)
    when its node cannot be configured (its log says why): the supervisor's cue not to restart it."""
    from ..nodes.lifecycle import bring_up
    tune_interpreter()
    params = graph_params(config)[node]  # before pinning: the default core split looks at every core
    if pin:
        os.sched_setaffinity(0, set(pin))
    expect(node != "hybrid_vla_prefix" or params["boundary_transport"] != "inproc", ConfigError,
           "boundary_transport=inproc cannot cross processes; use auto, shm or inline")
    if not autostart:
        params = {**params, "autostart": False}
    with ros_context() as context:
        if stop.requested():
            return 0
        n = make_node(node, params, context, name=name)
        with executor_with([n], context) as executor:
            if not stop.requested() and not bring_up(n):
                return os.EX_CONFIG
            spin_until_stopped(executor)
    return 0


def run_ros2_node(node: str) -> int:
    """`ros2 run hybrid_vla_ros <node> --ros-args --params-file ...`: plain rclpy arguments (ros/launch_support/entry.py)."""
    from ..nodes.lifecycle import bring_up
    tune_interpreter()
    with ros_context(args=sys.argv) as context:
        n = node_class(node)(context=context)
        with executor_with([n], context) as executor:
            if not stop.requested():
                bring_up(n)
            spin_until_stopped(executor)
    return 0


def graph_main(argv=None) -> int:
    """`ros2 run hybrid_vla_ros hybrid_vla_graph --prefix-params F --suffix-params F --scheduler-params F
    [--set NODE.PARAM=VALUE]... [--remap NODE:FROM:=TO]...`: the three nodes in one process (zero-copy
    handover). The launch files' single_process mode: their parameter overrides and remaps arrive this way."""
    import yaml
    parser = argparse.ArgumentParser(description="hybrid_vla_ros: all three nodes in one process")
    for short in SHORT:
        parser.add_argument(f"--{short}-params", default=None)
    parser.add_argument("--set", action="append", default=[], help="NODE.PARAM=VALUE (YAML value)")
    parser.add_argument("--remap", action="append", default=[], help="NODE:FROM:=TO")
    args, _ros_args = parser.parse_known_args(argv)
    files = {SHORT[s]: getattr(args, f"{s}_params") for s in SHORT if getattr(args, f"{s}_params")}
    overrides: dict[str, dict] = {}
    for item in args.set:
        target, _, value = item.partition("=")
        node, _, name = target.partition(".")
        expect(node in NODES and name and value, ConfigError, f"--set {item}: expected NODE.PARAM=VALUE, NODE in {NODES}")
        overrides.setdefault(node, {})[name] = yaml.safe_load(value)
    remaps: dict[str, dict] = {}
    for item in args.remap:
        node, _, rule = item.partition(":")
        src, _, dst = rule.partition(":=")
        expect(node in NODES and src and dst, ConfigError, f"--remap {item}: expected NODE:FROM:=TO, NODE in {NODES}")
        remaps.setdefault(node, {})[src] = dst
    return run_in_process(graph_params(overrides=overrides, node_files=files), remaps)


def main(argv=None) -> int:
    stop.install()  # first: signals that arrived while this child was starting were held for this moment
    parser = argparse.ArgumentParser(description="run one hybrid_vla_ros node (child of --processes)")
    parser.add_argument("--node", required=True, choices=NODES)
    parser.add_argument("--config", default=None)
    parser.add_argument("--pin", default="")
    parser.add_argument("--no-autostart", action="store_true", help="leave the node unconfigured (autostart false)")
    parser.add_argument("--name", default=None, choices=[STANDBY_NODE], help="the suffix's warm standby")
    args = parser.parse_args(argv)
    pin = [int(c) for c in args.pin.split(",") if c]
    expect(all(c in allowed_cores() for c in pin), ConfigError, f"--pin {pin}: not all cores are allowed here")
    try:
        return run_single_node(args.node, args.config, pin, autostart=not args.no_autostart, name=args.name)
    finally:
        stop.ignore_further()


if __name__ == "__main__":
    sys.exit(main())
