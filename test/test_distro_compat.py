"""The ROS layer runs on Humble, Jazzy and Kilted rclpy: APIs newer than Humble are guarded, and the parameter
machinery works on a node without `add_post_set_parameters_callback` (Humble's rclpy has none)."""

import ast
from pathlib import Path

import pytest
import rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter

from hybrid_vla_ros.ros.launch_support.bringup import graph_params, to_ros_parameters
from hybrid_vla_ros.ros.nodes.parameters import ParameterTable

from ros_harness import TINY_OVERRIDES

PACKAGE = Path(__file__).resolve().parents[1] / "hybrid_vla_ros"
# rclpy APIs that Humble lacks, and where the package may use them (behind a guard).
NEWER_THAN_HUMBLE = {"add_post_set_parameters_callback": {"ros/nodes/parameters.py"}}


class HumbleLikeNode(Node):
    """A node as Humble's rclpy builds it: no post-set parameter callback."""
    add_post_set_parameters_callback = None


@pytest.fixture
def context():
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    yield ctx
    rclpy.shutdown(context=ctx)


def test_parameters_are_validated_and_applied_without_a_post_set_callback(context):
    values = graph_params(overrides=TINY_OVERRIDES)["hybrid_vla_scheduler"]
    node = HumbleLikeNode("humble_like", context=context,
                          parameter_overrides=to_ros_parameters("hybrid_vla_scheduler", values))
    changed = []
    try:
        table = ParameterTable(node, "hybrid_vla_scheduler", on_change=lambda n, v: changed.append((n, v)))
        assert table._apply_in_validate
        ok = node.set_parameters([Parameter("cooldown_s", Parameter.Type.DOUBLE, 2.5)])[0]
        assert ok.successful and table["cooldown_s"] == 2.5 and changed == [("cooldown_s", 2.5)]
        bad = node.set_parameters([Parameter("cooldown_s", Parameter.Type.DOUBLE, -1.0)])[0]
        assert not bad.successful and bad.reason and table["cooldown_s"] == 2.5 and len(changed) == 1
    finally:
        node.destroy_node()


def test_newer_rclpy_apis_are_used_only_where_guarded():
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
               {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        for api, allowed in NEWER_THAN_HUMBLE.items():
            where = str(path.relative_to(PACKAGE))
            assert api not in used or where in allowed, f"{where} uses {api}, which Humble's rclpy lacks"


def test_no_with_rclpy_init_which_humble_lacks():
    for path in PACKAGE.rglob("*.py"):
        assert "with rclpy.init(" not in path.read_text(), path

