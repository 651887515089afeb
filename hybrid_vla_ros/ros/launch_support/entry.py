"""Console entry points of the nodes (`ros2 run hybrid_vla_ros <executable>`, launch files). Deliberately
light: the stop handler is installed before torch, rclpy or the model are imported, so a SIGINT from
`ros2 launch` at any moment of start-up ends the process cleanly with exit code 0."""

from __future__ import annotations

import sys

from ... import stop


def _run(node: str) -> int:
    stop.install()
    try:
        from .bringup import run_ros2_node
        return run_ros2_node(node)
    finally:
        stop.ignore_further()


def prefix_main() -> int:
    return _run("hybrid_vla_prefix")


def suffix_main() -> int:
    return _run("hybrid_vla_suffix")


def scheduler_main() -> int:
    return _run("hybrid_vla_scheduler")


def graph_main(argv=None) -> int:
    """`ros2 run hybrid_vla_ros hybrid_vla_graph --prefix-params F --suffix-params F --scheduler-params F`."""
    stop.install()
    try:
        from .bringup import graph_main as run_graph
        return run_graph(argv)
    finally:
        stop.ignore_further()


if __name__ == "__main__":
    sys.exit(graph_main())
