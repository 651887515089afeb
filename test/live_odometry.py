"""The car's odometry as it comes, for tests that drive the graph live: stamped at the wall clock every 50 ms and
published while the graph spins, camera frames stamped on its 0.1 s grid once enough of it went before."""

import time

from ros_harness import wait_until

ODOMETRY_NS, FRAME_NS = 50_000_000, 100_000_000


class LiveOdometry:
    """driver: has `odom` (an Odometry publisher) and `reports` (EndpointReports); odometry_at(stamp_ns, origin_ns)
    -> the Odometry at that stamp (its time counted from origin_ns); history_ns: how much odometry a frame needs
    before its stamp (the prefix's pose history)."""

    def __init__(self, driver, spin_graph, odometry_at, history_ns: int):
        self.driver, self.spin_graph, self.odometry_at, self.history_ns = driver, spin_graph, odometry_at, history_ns
        self.origin_ns = self.next_ns = self.history_from_ns = time.time_ns() // FRAME_NS * FRAME_NS
        self.sent = {}   # stamp -> the Odometry published

    def spin(self, timeout=0.02):
        while self.next_ns <= time.time_ns():
            self.sent[self.next_ns] = msg = self.odometry_at(self.next_ns, self.origin_ns)
            self.driver.odom.publish(msg)
            self.next_ns += ODOMETRY_NS
        self.spin_graph(timeout)

    def linked(self, timeout_s: float, nodes=("hybrid_vla_prefix", "hybrid_vla_suffix")) -> None:
        """The nodes' odometry readers count this writer (their own reports): what is sent from now on reaches
        them (reliable); what went before may not have (seen: a prefix 3 processes away missing a history pose)."""
        from hybrid_vla_ros.ros.topics import KINEMATIC_TOPIC
        assert wait_until(lambda: all(self.driver.reports.matched(node, "subscription", KINEMATIC_TOPIC)
                                      for node in nodes), self.spin, timeout_s), self.driver.reports.values
        self.history_from_ns = self.next_ns

    def frame_stamp(self, after_ns: int) -> int:
        """A camera stamp on the 0.1 s grid with history_ns of odometry before it, sent after the readers matched,
        and newer than after_ns."""
        assert wait_until(lambda: self.next_ns - ODOMETRY_NS >= max(self.history_from_ns + self.history_ns,
                                                                    after_ns + FRAME_NS), self.spin, 10)
        return (self.next_ns - ODOMETRY_NS) // FRAME_NS * FRAME_NS
