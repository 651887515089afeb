"""Two hosts: the prefix (+ scheduler) and the suffix on two "computers" of a car, here two network namespaces
joined by a veth pair, each with its own /dev/shm and hostname (what a second computer has of its own). The
graph must pick the inline handover by itself and give the trajectories of the one-process graph.

Needs root (network namespaces, mounts); skipped with the reason elsewhere."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from ros_harness import CAMERAS, TINY_OVERRIDES, domain_id

pytestmark = pytest.mark.slow

SUBNET = "10.231.{}.{}"
FRAMES = 8


def _missing_privilege() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces and mount a private /dev/shm"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"needs the `{tool}` command"
    probe = f"hvprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def two_hosts(tmp_path):
    """(host a, host b): network namespaces joined by a veth pair, multicast routed over it (DDS discovery),
    each with a /dev/shm of its own (a tmpfs here, bind-mounted by on_host); removed afterwards (the veth pair
    goes with the namespaces)."""
    reason = _missing_privilege()
    if reason:
        pytest.skip(reason)
    tag = f"hv{os.getpid() % 100000}"
    hosts = (f"{tag}a", f"{tag}b")
    net = os.getpid() % 250 + 1
    try:
        for host in hosts:
            _ip("netns", "add", host)
            (tmp_path / f"{host}_shm").mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777,size=512m", "tmpfs", str(tmp_path / f"{host}_shm")],
                           check=True)
        _ip("link", "add", f"{tag}va", "type", "veth", "peer", "name", f"{tag}vb")
        for i, host in enumerate(hosts):
            dev = f"{tag}v{'ab'[i]}"
            _ip("link", "set", dev, "netns", host)
            _ip("-n", host, "addr", "add", SUBNET.format(net, i + 1) + "/24", "dev", dev)
            _ip("-n", host, "link", "set", dev, "up")
            _ip("-n", host, "link", "set", "lo", "up")
            _ip("-n", host, "route", "add", "224.0.0.0/4", "dev", dev)
        yield hosts
    finally:
        for host in hosts:
            subprocess.run(["ip", "netns", "del", host], capture_output=True)
            subprocess.run(["umount", str(tmp_path / f"{host}_shm")], capture_output=True)


def on_host(host: str, argv: list[str], shm_dir) -> list[str]:
    """argv run "on another computer": its network namespace, its own hostname and its own /dev/shm (shared
    by every process of that host, as DDS's and our shared memory expect)."""
    boot = f'hostname {host} && mount --bind {shm_dir / f"{host}_shm"} /dev/shm && exec "$@"'
    return ["ip", "netns", "exec", host, "unshare", "--mount", "--uts", "--propagation", "private",
            "sh", "-c", boot, "sh", *argv]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "hybrid_vla_ros.cli", *args]


def stop(procs: list[subprocess.Popen]) -> list[int]:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(2)
    return [proc.wait(60) for proc in procs]


def trajectories_in(bag_dir) -> dict[int, np.ndarray]:
    from nav_msgs.msg import Path
    from rclpy.serialization import deserialize_message
    from hybrid_vla_ros.ros.bags.storage import read_bag
    from hybrid_vla_ros.ros.messages import stamp_to_ns
    from hybrid_vla_ros.ros.topics import TRAJECTORY_TOPIC
    out = {}
    for message in read_bag(bag_dir)[0]:
        if message[1] == TRAJECTORY_TOPIC:
            path = deserialize_message(message[3], Path)
            out[stamp_to_ns(path.header.stamp)] = np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])
    return out


def test_prefix_and_suffix_on_two_hosts_go_inline_and_equal_the_one_process_graph(two_hosts, tmp_path, monkeypatch):
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    from hybrid_vla_ros.ros.demo import drive_graph, write_sample_drive
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_prefix"].update(image_transport="compressed", use_kinematic_state=False,
                                          boundary_transport="auto", camera_topics=[f"{c}/compressed" for c in CAMERAS])
    bag = write_sample_drive(tmp_path / "drive", "tiny", [f"{c}/compressed" for c in CAMERAS], frames=FRAMES)
    params = graph_params(overrides=overrides)
    config = str(write_combined_config(params, tmp_path / "graph.yaml"))

    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain_id()))
    reference, one = drive_graph(bag, params, settle_s=30)  # this host, one process, loopback
    assert reference["transports"] == ["inproc"] and len(one) == FRAMES

    env = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET", "ROS_DOMAIN_ID": str(domain_id())}
    host_a, host_b = two_hosts
    graph = [subprocess.Popen(on_host(host_a, cli("graph", "--processes", "--nodes", "prefix,scheduler",
                                                 "--config", config), tmp_path), env=env),
             subprocess.Popen(on_host(host_b, cli("graph", "--nodes", "suffix", "--config", config), tmp_path), env=env)]
    try:
        out = tmp_path / "demo"
        driver = subprocess.run(on_host(host_a, cli("demo", "--graph-running", "--bag", str(bag), "--config", config,
                                                    "--out", str(out)), tmp_path),
                                env=env, capture_output=True, text=True, timeout=300)
        assert driver.returncode == 0, driver.stdout[-3000:] + driver.stderr[-3000:]
    finally:
        codes = stop(graph)
    assert codes == [0, 0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["transports"] == ["inline"], summary["transports"]  # auto: the suffix's /dev/shm is not ours
    two = trajectories_in(summary["trajectory_bag"])
    assert sorted(two) == sorted(one), (sorted(two), sorted(one))
    for stamp in one:
        np.testing.assert_allclose(two[stamp], one[stamp], atol=1e-5)
