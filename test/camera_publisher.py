"""A camera driver in its own process (as on a car): publishes `count` frames of the tiny model's two cameras
at WIDTHxHEIGHT, raw (an encoding) or compressed (jpeg/png), best effort like Autoware's cameras.

    python camera_publisher.py WIDTH HEIGHT ENCODING_OR_FORMAT COUNT PERIOD_S
"""

import sys
import time

import numpy as np

CAMERAS = ["/test/cam0/image", "/test/cam1/image"]


def camera_image(seq: int, camera: int, height: int, width: int) -> np.ndarray:
    """Deterministic content: a coarse random mosaic scaled up (structure survives any resize), plus noise."""
    rng = np.random.default_rng(1000 * seq + camera)
    mosaic = rng.integers(0, 256, (9, 16, 3), dtype=np.uint8)
    image = mosaic[np.arange(height) * 9 // height][:, np.arange(width) * 16 // width]
    return np.clip(image.astype(np.int16) + rng.integers(-8, 8, image.shape, dtype=np.int16), 0, 255).astype(np.uint8)


def stamp_ns(seq: int) -> int:
    return int(time.time() * 1e9) if seq < 0 else 1_000_000_000 + seq * 100_000_000


def message(seq: int, camera: int, height: int, width: int, kind: str):
    from sensor_msgs.msg import CompressedImage, Image
    from hybrid_vla_ros.ros import messages
    image = camera_image(seq, camera, height, width)
    if kind in ("jpeg", "png"):
        msg = messages.array_to_compressed(image, CompressedImage(), kind)
    else:
        msg = messages.array_to_image(image, Image())
        if kind == "bgr8":
            msg.encoding, msg.data = "bgr8", image[..., ::-1].tobytes()
    messages.ns_to_stamp(stamp_ns(seq), msg.header.stamp)
    return msg


def wait_for_prefix(context, node, pubs, deadline: float) -> None:
    """This node's writers count the prefix's readers, then the prefix reports that its camera readers matched
    every writer the graph lists (this node's included: a best-effort image sent before the prefix's reader has
    matched this writer is dropped; discovery matches each side separately). Exits 1 (why on stderr) without it."""
    from rclpy.executors import SingleThreadedExecutor
    from hybrid_vla_ros.ros.nodes.diagnostics import EndpointReports
    reports = EndpointReports(node)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    topics = [p.topic_name for p in pubs]
    while not (all(p.get_subscription_count() for p in pubs) and
               reports.matched("hybrid_vla_prefix", "subscription", *topics)):
        if time.monotonic() > deadline:
            sys.exit(f"camera_publisher: the prefix did not report matching {topics}: {reports.values}")
        executor.spin_once(timeout_sec=0.05)
    reports.close()
    executor.remove_node(node)


def main(width: int, height: int, kind: str, count: int, period_s: float) -> None:
    import rclpy
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CompressedImage, Image
    from hybrid_vla_ros.ros.launch_support.session import ros_context
    with ros_context() as context:
        node = rclpy.create_node("test_camera_driver", context=context)
        msg_type = CompressedImage if kind in ("jpeg", "png") else Image
        pubs = [node.create_publisher(msg_type, topic + ("/compressed" if msg_type is CompressedImage else ""),
                                      qos_profile_sensor_data) for topic in CAMERAS]
        wait_for_prefix(context, node, pubs, deadline=time.monotonic() + 30)
        for seq in range(count):
            for camera, pub in enumerate(pubs):
                pub.publish(message(seq, camera, height, width, kind))
            time.sleep(period_s)
        time.sleep(1.0)
        node.destroy_node()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
