"""Both launch files, run for real through launch.LaunchService (the engine behind `ros2 launch`): the three
nodes come up active with the given remaps and parameters, a frame published on the camera topics gives a
trajectory on the remapped output, and Ctrl-C stops every process with exit code 0.

launch/launch_ros are not on PyPI: an installed launch_ros is used when importable (a ROS machine), else
the unmodified copy in ../shared/vendor/ros2_launch (the project's machines); the test skips, saying so, only
where neither exists. The install prefix `colcon build` would make is laid out in a temporary folder."""

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest

from ros_harness import CAMERAS, TINY_OVERRIDES, domain_id, wait_until

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
VENDOR = [ROOT.parent / "shared" / "vendor" / "ros2_launch", Path("/work/shared/vendor/ros2_launch")]
EXECUTABLES = {"hybrid_vla_prefix": "prefix_main", "hybrid_vla_suffix": "suffix_main",
               "hybrid_vla_scheduler": "scheduler_main", "hybrid_vla_graph": "graph_main"}
KINEMATIC, TRAJECTORY = "/test/launch/odometry", "/test/launch/trajectory"
CANDIDATES = "/test/launch/candidate_trajectories"
# CandidateTrajectories go out where Autoware's packages are importable (the nodes run in this environment)
HAS_CANDIDATES = importlib.util.find_spec("autoware_internal_planning_msgs") is not None


def launch_paths() -> tuple[list[str], list[str]] | None:
    """(extra PYTHONPATH, extra AMENT_PREFIX_PATH) to run launch files, or None where launch is missing. An
    installed launch_ros needs none; one this process imported from the vendored copy (another test put it on
    sys.path: find_spec then answers from sys.modules) does: the launch subprocess does not inherit sys.path."""
    vendor = next((v for v in VENDOR if (v / "site").is_dir()), None)
    spec = importlib.util.find_spec("launch_ros")
    vendored = vendor is not None and spec is not None and str(vendor.resolve()) in str(Path(spec.origin).resolve())
    if spec is not None and importlib.util.find_spec("launch_xml") and not vendored:
        return [], []
    return ([str(vendor / "site")], [str(vendor / "ament")]) if vendor else None


def install_prefix(tmp: Path) -> Path:
    """What `colcon build` installs for this package: share/ (package.xml, launch, config), the ament index
    marker, and lib/hybrid_vla_ros/<executable> for every node executable."""
    prefix = tmp / "install"
    share = prefix / "share" / "hybrid_vla_ros"
    shutil.copytree(ROOT / "launch", share / "launch")
    shutil.copytree(ROOT / "config", share / "config")
    shutil.copy(ROOT / "package.xml", share / "package.xml")
    index = prefix / "share" / "ament_index" / "resource_index" / "packages"
    index.mkdir(parents=True)
    (index / "hybrid_vla_ros").write_text("")
    lib = prefix / "lib" / "hybrid_vla_ros"
    lib.mkdir(parents=True)
    for exe, function in EXECUTABLES.items():
        script = lib / exe
        script.write_text(f"#!{sys.executable}\nimport sys\nfrom hybrid_vla_ros.ros.launch_support.entry import {function}\n"
                          f"sys.exit({function}())\n")
        script.chmod(0o755)
    return prefix


RUNNER = """
import sys
from launch import LaunchDescription, LaunchService
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import AnyLaunchDescriptionSource
service = LaunchService(noninteractive=True)
arguments = [tuple(a.split(":=", 1)) for a in sys.argv[2:]]
service.include_launch_description(LaunchDescription([IncludeLaunchDescription(
    AnyLaunchDescriptionSource(sys.argv[1]), launch_arguments=arguments)]))
sys.exit(service.run())
"""


def start_launch(tmp: Path, launch_file: str, single_process: bool, domain: int, prefix: Path | None = None,
                 python_path: tuple = (), extra_args: tuple = ()):
    """prefix: an install prefix (default: the layout of install_prefix); python_path: put first on PYTHONPATH
    (a colcon install's site-packages, so that the nodes import the installed package)."""
    paths = launch_paths()
    if paths is None:
        pytest.skip("neither an installed launch_ros nor ../shared/vendor/ros2_launch is available here")
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_prefix"].update(use_kinematic_state=True)
    values = graph_params(overrides=overrides)
    values["hybrid_vla_suffix_standby"] = values["hybrid_vla_suffix"]   # a file keyed by node name: its own key
    params = write_combined_config(values, tmp / "graph.param.yaml")
    prefix = prefix or install_prefix(tmp)
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
           "PYTHONPATH": os.pathsep.join([*python_path, *paths[0], os.environ.get("PYTHONPATH", "")]),
           "AMENT_PREFIX_PATH": os.pathsep.join(paths[1] + [str(prefix), os.environ.get("AMENT_PREFIX_PATH", "")])}
    args = [f"{n}_param_file:={params}" for n in ("prefix", "suffix", "scheduler")]
    args += [f"input/kinematic_state:={KINEMATIC}", f"output/trajectory:={TRAJECTORY}",
             f"output/trajectories:={CANDIDATES}", "use_sim_time:=false",
             "prefix_cores:=[0]", f"single_process:={'true' if single_process else 'false'}", *extra_args]
    path = prefix / "share" / "hybrid_vla_ros" / "launch" / launch_file
    return subprocess.Popen([sys.executable, "-c", RUNNER, str(path), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=terminal_signals)


def terminal_signals() -> None:
    """launch as a terminal starts it: SIGINT and SIGQUIT at their default action. A suite run in the
    background of a non-interactive shell inherits them ignored (POSIX), and launch then never hears the
    Ctrl-C: its nodes stop (they install their own handlers) and launch respawns them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class Probe:
    """A node in the test process that asks the launched graph what it is and feeds it one frame."""

    def __init__(self):
        import rclpy
        from nav_msgs.msg import Odometry, Path as PathMsg
        from rclpy.node import Node
        from sensor_msgs.msg import Image
        from rclpy.executors import SingleThreadedExecutor
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = Node("launch_probe", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.paths = []
        self.node.create_subscription(PathMsg, TRAJECTORY, self.paths.append, 10)
        self.candidates = []
        if HAS_CANDIDATES:
            from autoware_internal_planning_msgs.msg import CandidateTrajectories
            self.node.create_subscription(CandidateTrajectories, CANDIDATES, self.candidates.append, 10)
        self.images = [self.node.create_publisher(Image, t, 10) for t in CAMERAS]
        self.odometry = self.node.create_publisher(Odometry, KINEMATIC, 10)

    def spin(self, timeout_s=0.05):
        self.executor.spin_once(timeout_sec=timeout_s)

    def call(self, srv_type, name, request, timeout_s=60):
        """Retry until answered: the reply path of a new client can be unmatched for a while."""
        client = self.node.create_client(srv_type, name)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if client.wait_for_service(timeout_sec=1.0):
                future = client.call_async(request)
                if wait_until(future.done, self.spin, 3.0):
                    return future.result()
        raise AssertionError(f"{name}: no answer in {timeout_s} s")

    def state(self, node):
        from lifecycle_msgs.srv import GetState
        return self.call(GetState, f"/{node}/get_state", GetState.Request()).current_state.label

    def parameters(self, node, names):
        from rcl_interfaces.srv import GetParameters
        from rclpy.parameter import parameter_value_to_python
        reply = self.call(GetParameters, f"/{node}/get_parameters", GetParameters.Request(names=names))
        return dict(zip(names, (parameter_value_to_python(v) for v in reply.values)))

    def send_frame(self, seq):
        from nav_msgs.msg import Odometry
        from sensor_msgs.msg import Image
        from hybrid_vla_ros.model.inputs import synthetic_frame
        from hybrid_vla_ros.model.presets import get_preset
        from hybrid_vla_ros.ros import messages
        stamp = time.time_ns()
        frame = synthetic_frame(get_preset("tiny"), seq, stamp_ns=stamp)
        odom = Odometry()
        odom.header.frame_id = "map"   # the shipped suffix's frame_id: a pose in another frame is refused
        messages.ns_to_stamp(stamp, odom.header.stamp)
        self.odometry.publish(odom)
        for pub, image in zip(self.images, frame.images):
            msg = messages.array_to_image(np.ascontiguousarray(image), Image())
            messages.ns_to_stamp(stamp, msg.header.stamp)
            pub.publish(msg)

    def close(self):
        import rclpy
        self.executor.remove_node(self.node)
        self.executor.shutdown()  # before destroying the node: session.RELEASE_NOTE
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def resend_until(probe, answered, frames: int = 30) -> None:
    """Send frames until `answered()` (DDS matching is asymmetric at start-up: the first may go to nobody)."""
    for seq in range(frames):
        probe.send_frame(seq)
        if wait_until(answered, probe.spin, 2.0):
            return


def publishers_of(node, name: str) -> dict:
    """Topic -> types the graph knows `name` publishes; {} while the graph cache has not learnt the node yet (a
    node's lifecycle services can answer before its node entry reaches this participant: one run in six here
    raised NodeNameNonExistentError right after get_state said active)."""
    from rclpy.node import NodeNameNonExistentError
    try:
        return dict(node.get_publisher_names_and_types_by_node(name, "/"))
    except NodeNameNonExistentError:
        return {}


@pytest.mark.parametrize("launch_file, single_process", [("hybrid_vla.launch.py", False),
                                                         ("hybrid_vla.launch.xml", False),
                                                         ("hybrid_vla.launch.xml", True)],
                         ids=["py-processes", "xml-processes", "xml-single-process"])
def test_launch_file_brings_the_graph_up_active_serves_frames_and_stops_cleanly(tmp_path, monkeypatch, launch_file,
                                                                                single_process):
    launch_serves_and_stops(tmp_path, monkeypatch, launch_file, single_process)


@pytest.mark.parametrize("launch_file", ["hybrid_vla.launch.py", "hybrid_vla.launch.xml"], ids=["py", "xml"])
def test_warm_standby_launches_a_second_suffix_process_that_comes_up_and_stops_cleanly(tmp_path, monkeypatch,
                                                                                      launch_file):
    out = launch_serves_and_stops(tmp_path, monkeypatch, launch_file, False, extra_args=("warm_standby:=true",),
                                  standby=True)
    assert "hybrid_vla_suffix_standby" in out


def launch_serves_and_stops(tmp_path, monkeypatch, launch_file, single_process, standby=False, **where) -> str:
    """The launched graph comes up active, answers a frame on the remapped outputs and stops on Ctrl-C with
    every process finished cleanly. where: start_launch's prefix / python_path / extra_args. standby: the warm
    standby suffix is one more node and process. -> launch's output."""
    domain = domain_id()
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    proc = start_launch(tmp_path, launch_file, single_process, domain, **where)
    probe = None
    nodes = ("hybrid_vla_prefix", "hybrid_vla_suffix", "hybrid_vla_scheduler") + \
        (("hybrid_vla_suffix_standby",) if standby else ())
    try:
        probe = Probe()
        for node in nodes:
            assert wait_until(lambda: probe.state(node) == "active", probe.spin, 90), f"{node} not active"
        prefix = probe.parameters("hybrid_vla_prefix", ["cores", "use_sim_time", "model.preset"])
        assert prefix == {"cores": [0], "use_sim_time": False, "model.preset": "tiny"}
        assert wait_until(lambda: TRAJECTORY in publishers_of(probe.node, "hybrid_vla_suffix"), probe.spin, 30), \
            publishers_of(probe.node, "hybrid_vla_suffix")
        assert wait_until(lambda: all(p.get_subscription_count() for p in probe.images), probe.spin, 30)
        from hybrid_vla_ros.ros.messages import stamp_to_ns
        shared = lambda: ({stamp_to_ns(c.candidate_trajectories[0].header.stamp) for c in probe.candidates}  # noqa: E731
                          & {stamp_to_ns(p.header.stamp) for p in probe.paths})
        # Frames until one is answered on both outputs: DDS matches each topic on its own, and a volatile message
        # reaches only the readers its writer matched (seen: the first frame's trajectory received, its candidates
        # sent before this reader matched, and no frame after it: a fixed 10 s wait could never see one)
        resend_until(probe, shared if HAS_CANDIDATES else (lambda: probe.paths))
        assert probe.paths, "no trajectory on the remapped output"
        assert (CANDIDATES in publishers_of(probe.node, "hybrid_vla_suffix")) == HAS_CANDIDATES
        assert not HAS_CANDIDATES or shared(), "no CandidateTrajectories with a trajectory's stamp"
    finally:
        if probe is not None:
            probe.close()
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal reaches launch and every node
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail("launch did not stop within 60 s of Ctrl-C; its output:\n" + out[-6000:])
        print(out[-6000:])  # shown by pytest when anything above failed
    assert proc.returncode == 0, out[-3000:]
    assert "has died" not in out and "Traceback" not in out, out[-3000:]
    expected = 1 if single_process else len(nodes)
    assert out.count("process has finished cleanly") == expected, out[-3000:]
    return out


# The Autoware-facing launch arguments of hybrid_vla.launch.{xml,py}: each remaps the node-relative topic of its name.
LAUNCH_TOPICS = ("input/kinematic_state", "input/route", "input/acceleration", "output/trajectory",
                 "output/trajectories", "output/turn_indicators")


def test_xml_launch_file_remaps_match_the_topics_module():
    from hybrid_vla_ros.ros.topics import (ACCELERATION_TOPIC, LAUNCH_CANDIDATES_TOPIC, LAUNCH_TRAJECTORY_TOPIC, REMAPS,
                                          ROUTE_TOPIC, STANDBY_NODE, STANDBY_REMAPS, TURN_INDICATORS_TOPIC)
    root = ElementTree.parse(ROOT / "launch" / "hybrid_vla.launch.xml").getroot()
    graph_names = {**REMAPS["hybrid_vla_prefix"], **REMAPS["hybrid_vla_suffix"]}   # the graph's
    arguments = {f"$(var {topic})": graph_names[f"~/{topic}"] for topic in LAUNCH_TOPICS}
    for node in root.iter("node"):
        if node.get("exec") == "hybrid_vla_graph":
            continue
        rules = {r.get("from"): arguments.get(r.get("to"), r.get("to")) for r in node.iter("remap")}
        assert rules == (STANDBY_REMAPS if node.get("name") == STANDBY_NODE else REMAPS[node.get("name")]), \
            node.get("name")
    defaults = {a.get("name"): a.get("default") for a in root.iter("arg")}
    assert defaults["input/kinematic_state"] == REMAPS["hybrid_vla_prefix"]["~/input/kinematic_state"]
    assert defaults["input/route"] == ROUTE_TOPIC == "/planning/mission_planning/route"
    assert defaults["input/acceleration"] == ACCELERATION_TOPIC == "/localization/acceleration"
    assert defaults["output/trajectory"] == LAUNCH_TRAJECTORY_TOPIC == "/planning/hybrid_vla/trajectory"
    assert defaults["output/trajectories"] == LAUNCH_CANDIDATES_TOPIC
    assert defaults["output/turn_indicators"] == TURN_INDICATORS_TOPIC
    # Beside Autoware nothing of its planning chain is fed: /planning/trajectory is the planning validator's
    # output (autoware_launch tier4_planning_launch/launch/planning.launch.xml), bypassed if published to
    assert "/planning/trajectory" not in defaults.values() and "/planning/turn_indicators_cmd" not in defaults.values()
    graph = next(n for n in root.iter("node") if n.get("exec") == "hybrid_vla_graph").get("args")
    for argument in LAUNCH_TOPICS:  # the single process too
        for node in ("hybrid_vla_prefix", "hybrid_vla_suffix"):
            expected = f"~/{argument}" in REMAPS[node]
            assert (f"{node}:~/{argument}:=$(var {argument})" in graph) == expected, (node, argument)


def test_python_launch_file_declares_the_xml_twins_arguments_and_defaults():
    """The .py twin: the same launch arguments with the same defaults as the XML (its module read, not run)."""
    import ast
    root = ElementTree.parse(ROOT / "launch" / "hybrid_vla.launch.xml").getroot()
    xml_defaults = {a.get("name"): a.get("default") for a in root.iter("arg")}
    source = (ROOT / "launch" / "hybrid_vla.launch.py").read_text()
    tree = ast.parse(source)
    table = next(n.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "ARGUMENTS")
    from hybrid_vla_ros.ros import topics
    py_defaults = {}
    for key, value in zip(table.keys, table.values):
        default = value.elts[0]
        py_defaults[key.value] = (getattr(topics, default.id) if isinstance(default, ast.Name) else default.value)
    assert {k: v for k, v in xml_defaults.items() if k in py_defaults} == py_defaults
    assert set(LAUNCH_TOPICS) <= set(py_defaults)
    topics_line = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                       and getattr(n.targets[0], "id", "") == "LAUNCH_TOPICS")
    assert tuple(e.value for e in topics_line.elts) == LAUNCH_TOPICS
