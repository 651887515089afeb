"""A planner-side subscriber in its own process (as Autoware's selector is): takes the real
autoware_planning_msgs/Trajectory and autoware_internal_planning_msgs/CandidateTrajectories and prints each
as one JSON line, then exits once it has `count` of each (or after `timeout_s`).

    python autoware_listener.py TRAJECTORY_TOPIC CANDIDATES_TOPIC COUNT TIMEOUT_S

Prints `ready` once both subscriptions exist. Exit code 0 when it got `count` of each, 1 otherwise. Each line
has `received_ns` (wall clock when the message came: a stamp's age at receipt; the middleware's own receive
time where rclpy hands it to the callback, so a busy machine delaying this process's executor does not age
the message) and each point [x, y, orientation z, orientation w, speed, acceleration, time_from_start ns, z].
"""

import json
import sys
import time


def points_of(points) -> list:
    return [[p.pose.position.x, p.pose.position.y, p.pose.orientation.z, p.pose.orientation.w,
             p.longitudinal_velocity_mps, p.acceleration_mps2,
             p.time_from_start.sec * 1_000_000_000 + p.time_from_start.nanosec, p.pose.position.z] for p in points]


def stamp_of(header) -> int:
    return header.stamp.sec * 1_000_000_000 + header.stamp.nanosec


def received_ns(info) -> int:
    """The middleware's receive time (rclpy's MessageInfo), else now."""
    return int(info["received_timestamp"]) if info and info.get("received_timestamp") else time.time_ns()


def trajectory_line(msg, info=None) -> dict:
    return {"kind": "trajectory", "received_ns": received_ns(info), "type": f"{type(msg).__module__}.{type(msg).__name__}",
            "point_type": f"{type(msg.points[0]).__module__}" if msg.points else None,
            "stamp_ns": stamp_of(msg.header), "frame_id": msg.header.frame_id, "points": points_of(msg.points)}


def candidates_line(msg, info=None) -> dict:
    return {"kind": "candidates", "received_ns": received_ns(info), "type": f"{type(msg).__module__}.{type(msg).__name__}",
            "candidates": [{"stamp_ns": stamp_of(c.header), "frame_id": c.header.frame_id,
                            "generator_id": bytes(c.generator_id.uuid).hex(), "points": points_of(c.points)}
                           for c in msg.candidate_trajectories],
            "generators": [{"generator_id": bytes(g.generator_id.uuid).hex(), "name": g.generator_name.data}
                           for g in msg.generator_info]}


def main(trajectory_topic: str, candidates_topic: str, count: int, timeout_s: float) -> int:
    import rclpy
    from autoware_internal_planning_msgs.msg import CandidateTrajectories
    from autoware_planning_msgs.msg import Trajectory
    from rclpy.executors import SingleThreadedExecutor
    got = {"trajectory": 0, "candidates": 0}

    def emit(line: dict) -> None:
        got[line["kind"]] += 1
        print(json.dumps(line), flush=True)

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node("autoware_listener", context=context)
        try:   # rclpy that hands MessageInfo to a two-argument callback (Jazzy's and newer)
            from rclpy.subscription import MessageInfo  # noqa: F401
            on_trajectory, on_candidates = (lambda m, i: emit(trajectory_line(m, i)),
                                            lambda m, i: emit(candidates_line(m, i)))
        except ImportError:
            on_trajectory, on_candidates = lambda m: emit(trajectory_line(m)), lambda m: emit(candidates_line(m))
        node.create_subscription(Trajectory, trajectory_topic, on_trajectory, 50)
        node.create_subscription(CandidateTrajectories, candidates_topic, on_candidates, 50)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        print("ready", flush=True)
        deadline = time.monotonic() + timeout_s
        while min(got.values()) < count and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        executor.shutdown()
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
    return 0 if min(got.values()) >= count else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
