"""A map server in its own process (as Autoware's lanelet2 map loader is): publishes the bytes of each file named
on stdin (one path a line) as a real autoware_map_msgs/LaneletMapBin on TOPIC, latched (reliable, transient
local, depth 1: a subscriber that comes later still gets the newest), and prints `published N` after each.
Exits when stdin closes.

    python vector_map_publisher.py TOPIC
"""

import sys
from pathlib import Path


def main(topic: str) -> int:
    import rclpy
    from autoware_map_msgs.msg import LaneletMapBin
    from hybrid_vla_ros.ros.inputs.route_input import LATCHED
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("vector_map_publisher", context=context)
    pub = node.create_publisher(LaneletMapBin, topic, LATCHED)
    try:
        for count, line in enumerate(sys.stdin, start=1):
            path = Path(line.strip())
            msg = LaneletMapBin(version_map_format="1.1.1", name_map=path.stem, data=path.read_bytes())
            msg.header.frame_id = "map"
            msg.header.stamp = node.get_clock().now().to_msg()
            pub.publish(msg)
            print(f"published {count}", flush=True)
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
