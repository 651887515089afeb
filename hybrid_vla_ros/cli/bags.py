"""rosbag2 commands: record, replay, make-sample-drive, seat-report."""

from __future__ import annotations

import json
import sys
import time

from .. import stop


def _with_bag_node(job, name: str):
    """job(node, spin) on a plain node of this name (hybrid_vla_record / _replay: a recorder and a replayer in one
    graph must not share a name, the replayer reads the recorder's endpoints report by it); a stop request ends
    the spin cleanly."""
    from rclpy.node import Node
    from ..ros.launch_support.session import executor_with, ros_context
    with ros_context() as context:
        node = Node(name, context=context)
        with executor_with([node], context) as executor:
            def spin(timeout_s: float, stopping: bool = False) -> None:
                if not stopping:   # stopping: a last spin after the stop request (the recorder's drain)
                    stop.check()
                executor.spin_once(timeout_sec=timeout_s)
            return job(node, spin)


def cmd_record(args) -> int:
    from ..ros.bags.record import Recorder
    topics = {t.partition(":")[0]: t.partition(":")[2] or None for t in args.topics}

    def record(node, spin):
        recorder = Recorder(node, args.out, topics, args.storage)
        end = time.monotonic() + args.duration
        try:
            while time.monotonic() < end and not stop.requested():
                spin(0.05)
            drain(recorder, spin)
        finally:
            print(json.dumps({"bag": args.out, "messages": recorder.close()}))
        return 0
    return _with_bag_node(record, "hybrid_vla_record")


DRAIN_QUIET_S, DRAIN_LIMIT_S = 0.5, 5.0


def drain(recorder, spin) -> None:
    """At the end of a recording, take the messages that already reached the recorder's readers (DDS queues them
    until the executor takes them; on a busy machine that lags): spin until none came for DRAIN_QUIET_S, at most
    DRAIN_LIMIT_S. A stop then loses nothing that arrived before it."""
    end, quiet_since, last = time.monotonic() + DRAIN_LIMIT_S, time.monotonic(), recorder.messages()
    while time.monotonic() < end and time.monotonic() - quiet_since < DRAIN_QUIET_S:
        spin(0.02, stopping=True)
        if recorder.messages() != last:
            last, quiet_since = recorder.messages(), time.monotonic()


SETTLE_S = 0.5


def cmd_replay(args) -> int:
    from ..ros.bags.replay import Replayer

    def replay(node, spin):
        replayer = Replayer(node, args.bag, skew_ms=args.skew_ms, clock=args.clock is not None,
                            clock_hz=args.clock or 40.0)
        if replayer.skipped:
            print(f"replay: skipping topics whose message type is not installed here: {replayer.skipped}",
                  file=sys.stderr)
        if replayer.wait_for_subscribers(args.wait_s, spin):
            # matching is asymmetric: the readers may learn of our writers a little after we saw them, and a
            # best-effort sample sent before that is lost; a short settle keeps the first frame
            deadline = time.monotonic() + SETTLE_S
            while time.monotonic() < deadline:
                spin(0.05)
        # open loop: nothing answers a plain replay, so rate 0 means "publish as fast as possible"
        frames = replayer.run(spin, answered=lambda: 1 << 30, rate=args.rate)
        unacknowledged = replayer.wait_for_acks(args.ack_wait_s)
        if unacknowledged:
            print(f"replay: a reliable reader did not acknowledge the last messages on {unacknowledged} within "
                  f"{args.ack_wait_s} s (it may miss them)", file=sys.stderr)
        print(json.dumps({"bag": args.bag, "frames": frames, "incomplete_frames": replayer.incomplete_frames,
                          "topics": replayer.topics(), "skipped": replayer.skipped,
                          "unacknowledged": unacknowledged}))
        return 0
    return _with_bag_node(replay, "hybrid_vla_replay")


def cmd_make_sample_drive(args) -> int:
    import yaml
    from ..model.presets import PRESETS
    from ..ros.launch_support.bringup import config_dir
    from ..ros.demo import write_sample_drive
    topics = yaml.safe_load((config_dir() / "hybrid_vla_prefix.param.yaml").read_text())["/**"]["ros__parameters"]["camera_topics"]
    spec = PRESETS[args.preset]
    topics = topics if len(topics) == spec.num_cameras else [f"/sensing/camera/camera{i}/image_rect_color/compressed"
                                                            for i in range(spec.num_cameras)]
    if args.road:
        from ..ros.bags.drives import write_road_drive
        path = write_road_drive(args.out, args.preset, topics, args.frames, args.seed, args.rate_hz, args.storage)
    else:
        path = write_sample_drive(args.out, args.preset, topics, args.frames, args.rate_hz, args.storage)
    print(f"wrote {args.frames} frames x {spec.num_cameras} cameras to {path}"
          + (" (+ ground truth on /ground_truth/trajectory)" if args.road else ""))
    return 0


def cmd_seat_report(args) -> int:
    from ..bench.seat.table import seat_plot, seat_table
    from ..bench.seat.timing import analyse
    from ..report import write_report
    from ..bench.seat.bag import read_seat_bag
    report = analyse(read_seat_bag(args.bag, args.topic), args.consumer_hz, args.window_s)
    print(seat_table(report))
    write_report(report, args.json)
    if args.plot:
        seat_plot(report, args.plot)
    return 0


def register(sub) -> None:
    p = sub.add_parser("record", help="record topics to a rosbag2 folder")
    p.add_argument("--out", required=True)
    p.add_argument("--topics", nargs="+", required=True,
                   help="TOPIC or TOPIC:TYPE (e.g. /a:nav_msgs/msg/Path); without a type, the publishers' type. "
                        "Each topic is subscribed once it has a publisher, with a QoS matching all of them")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--storage", default="mcap", choices=("mcap", "sqlite3"))
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("replay", help="publish a rosbag2 folder")
    p.add_argument("bag")
    p.add_argument("--rate", type=float, default=1.0, help="1: recorded rate, 2: twice as fast, 0: as fast as possible")
    p.add_argument("--clock", type=float, nargs="?", const=40.0, default=None, metavar="HZ",
                   help="publish /clock with the bag's time (default 40 Hz), for nodes with use_sim_time:=true")
    p.add_argument("--skew-ms", type=float, default=20.0,
                   help="camera images whose header stamps lie within this form one frame")
    p.add_argument("--wait-s", type=float, default=5.0, help="wait this long for the cameras' subscribers")
    p.add_argument("--ack-wait-s", type=float, default=5.0,
                   help="at the end, wait this long for reliable readers to acknowledge the last messages")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("make-sample-drive", help="write a synthetic drive bag for a preset")
    p.add_argument("--preset", default="bench")
    p.add_argument("--out", required=True)
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--rate-hz", type=float, default=10.0)
    p.add_argument("--storage", default="mcap", choices=("mcap", "sqlite3"))
    p.add_argument("--road", action="store_true",
                   help="the synthetic road (lane lines, curves, a lead vehicle, light and fog) with the ground-truth "
                        "future path, instead of plain synthetic frames")
    p.add_argument("--seed", type=int, default=0, help="--road: the drive's seed")
    p.set_defaults(func=cmd_make_sample_drive)

    p = sub.add_parser("seat-report", help="how a recorded planner output fills the diffusion planner's seat: rate, "
                                           "points, horizon, stamps, what a 10 Hz consumer with a 0.2 s window holds")
    p.add_argument("bag", help="a rosbag2 folder holding CandidateTrajectories (or a Trajectory topic)")
    p.add_argument("--topic", default=None, help="the topic to report (default: the bag's one CandidateTrajectories "
                                                 "topic, else its one Trajectory topic)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the whole report (with per-set ages) here")
    p.add_argument("--plot", default=None, metavar="PNG", help="plot the newest set's age and the intervals here")
    p.add_argument("--consumer-hz", type=float, default=10.0, help="the consumer's timer rate (the concatenator's: 10)")
    p.add_argument("--window-s", type=float, default=0.2,
                   help="the consumer keeps a set while now - stamp <= this (the concatenator's duration_time: 0.2)")
    p.set_defaults(func=cmd_seat_report)
