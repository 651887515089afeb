"""`hybrid-vla seat-report BAG` (issue 50, item 8): what a recorded planner output gives Autoware's consumers.
Bags written with the package's writer from the real Autoware messages (serialised by rclpy) with chosen receive
times and stamps: known rates give known shares of a 10 Hz consumer's ticks, exactly; the stamp convention is
read from trajectory_info or the odometry; /clock puts a sim-time recording on one clock; damaged messages are
counted, a bag without candidates is one clear line. Then the report of a bag the demo's graph records."""

import json

import pytest

from test_autoware_msgs import need_real_messages

CANDIDATES = "/planning/generator/diffusion_planner/candidate_trajectories"
INFO = "/hybrid_vla_suffix/debug/trajectory_info"
ODOMETRY = "/localization/kinematic_state"
MS = 1_000_000
T0 = 1_800_000_000 * 1_000_000_000   # the recorder's clock at the first set


def ros_time(ns, cls):
    return cls(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def candidates(stamps, points, dt_ns=100 * MS):
    """CandidateTrajectories: one candidate per stamp, `points` points dt_ns apart from t = 0."""
    from autoware_internal_planning_msgs.msg import CandidateTrajectories, CandidateTrajectory
    from autoware_planning_msgs.msg import TrajectoryPoint
    from builtin_interfaces.msg import Duration, Time
    from rclpy.serialization import serialize_message
    msg = CandidateTrajectories()
    for stamp in stamps:
        c = CandidateTrajectory(points=[TrajectoryPoint(time_from_start=ros_time(i * dt_ns, Duration))
                                        for i in range(points)])
        c.header.stamp, c.header.frame_id = ros_time(stamp, Time), "map"
        msg.candidate_trajectories.append(c)
    return serialize_message(msg)


def info(camera_ns, output_ns, **waits):
    from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
    from rclpy.serialization import serialize_message
    return serialize_message(DiagnosticStatus(name="hybrid_vla_suffix: trajectory", values=[
        KeyValue(key="stamp_ns", value=str(camera_ns)), KeyValue(key="output_stamp_ns", value=str(output_ns)),
        *(KeyValue(key=key, value=value) for key, value in waits.items())]))


def odometry(stamp_ns):
    from builtin_interfaces.msg import Time
    from nav_msgs.msg import Odometry
    from rclpy.serialization import serialize_message
    msg = Odometry()
    msg.header.stamp = ros_time(stamp_ns, Time)
    return serialize_message(msg)


def clock(value_ns):
    from builtin_interfaces.msg import Time
    from rclpy.serialization import serialize_message
    from rosgraph_msgs.msg import Clock
    return serialize_message(Clock(clock=ros_time(value_ns, Time)))


def write(path, messages):
    """messages: (receive_ns, topic, type, raw) -> a bag written with the package's writer, in receive order."""
    from hybrid_vla_ros.ros.bags.storage import BagWriter
    writer = BagWriter(path)
    for receive_ns, topic, msgtype, raw in sorted(messages, key=lambda m: m[0]):
        writer.write(topic, msgtype, receive_ns, raw)
    writer.close()
    return path


def report_of(path, **kw):
    from hybrid_vla_ros.bench.seat.timing import analyse
    from hybrid_vla_ros.bench.seat.bag import read_seat_bag
    return analyse(read_seat_bag(path, kw.pop("topic", None)), **kw)


CANDS_TYPE = "autoware_internal_planning_msgs/msg/CandidateTrajectories"


def test_publish_time_stamps_at_300_ms_are_held_two_ticks_of_three_and_the_table_says_so(tmp_path, capsys):
    """Every 300 ms, stamped at publish (age 0 at receipt), 36 points 0.1 s apart; trajectory_info says each
    frame's camera stamp was 450 ms before, and where its time went. A 10 Hz consumer ticking with the receipts holds the set at all 3
    ticks of an interval (the third is exactly 0.2 s old: kept, the concatenator drops only older), at any other
    phase at 2 of 3; held 2/3 of the time."""
    need_real_messages()
    sets = 21
    messages = []
    for k in range(sets):
        r = T0 + k * 300 * MS
        messages += [(r, CANDIDATES, CANDS_TYPE, candidates([r], 36)),
                     (r + 1, INFO, "diagnostic_msgs/msg/DiagnosticStatus",
                      info(r - 450 * MS, r, to_suffix_ms=str(300 + k), suffix_ms="140.5", output_wait_ms="nan"))]
    bag = write(tmp_path / "bag", messages)
    report = report_of(bag)
    assert report["topic"] == CANDIDATES and report["sets"] == sets and report["empty_sets"] == 0
    assert report["rate_hz"]["median"] == 1e9 / (300 * MS) and report["interval_s"]["min"] == report["interval_s"]["max"]
    assert report["points"]["min"] == report["points"]["max"] == 36
    assert report["horizon_s"]["min"] == report["horizon_s"]["max"] == 3.5
    assert report["spacing_s"]["median"] == 0.1
    assert report["age_at_receipt_ms"]["max"] == 0.0
    consumer = report["consumer"]
    assert consumer["ticks"] == 3 * (sets - 1)
    assert consumer["held_ticks_max"] == 1.0 and consumer["held_ticks_min"] == 2 / 3
    assert consumer["held_ticks_mean"] == pytest.approx((1 + 9 * 2 / 3) / 10, rel=1e-12)
    assert consumer["held_time"] == 2 / 3
    stamp = report["stamp"]
    assert stamp["convention"] == "publish time" and stamp["source"] == f"trajectory_info ({sets} of {sets} sets)"
    assert stamp["frame_age_at_publish_ms"]["median"] == 450.0
    waits = report["frame_waits_ms"]
    assert list(waits) == ["to_suffix_ms", "suffix_ms"]   # a non-finite wait is left out
    assert waits["to_suffix_ms"]["median"] == 310.0 and waits["suffix_ms"]["min"] == waits["suffix_ms"]["max"] == 140.5
    from hybrid_vla_ros.cli import main
    assert main(["seat-report", str(bag), "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")]) == 0
    out = capsys.readouterr().out
    assert "3.33 Hz from the median interval" in out and "publish time (from trajectory_info" in out
    assert "to_suffix_ms 310.0, suffix_ms 140.5" in out
    assert "newest set held at 70% of 60 ticks (67% to 100% by tick phase); 67% of the time" in out
    assert json.loads((tmp_path / "r.json").read_text())["consumer"] == consumer
    assert (tmp_path / "r.png").stat().st_size > 10_000


def test_odometry_stamps_at_10_hz_as_the_diffusion_planner_stamps_are_named_and_always_held(tmp_path):
    """Every 100 ms, 80 points 0.1 s apart (7.9 s), stamped with a 50 Hz odometry's stamp 50 ms before the
    receipt: the stamp is the odometry's, 50 ms old at receipt, held at every tick of every phase."""
    need_real_messages()
    messages = [(T0 - 50 * MS + k * 20 * MS, ODOMETRY, "nav_msgs/msg/Odometry", odometry(T0 - 50 * MS + k * 20 * MS))
                for k in range(160)]
    messages += [(T0 + k * 100 * MS, CANDIDATES, CANDS_TYPE, candidates([T0 + k * 100 * MS - 50 * MS], 80))
                 for k in range(30)]
    report = report_of(write(tmp_path / "bag", messages))
    assert report["stamp"] == {"convention": "the input odometry's stamp", "source": "odometry (30 of 30 sets)"}
    assert report["horizon_s"]["max"] == 7.9 and report["points"]["median"] == 80
    assert report["age_at_receipt_ms"]["min"] == report["age_at_receipt_ms"]["max"] == 50.0
    assert report["consumer"]["held_ticks_min"] == report["consumer"]["held_time"] == 1.0


def test_a_set_exactly_a_window_old_at_receipt_is_held_only_at_the_tick_of_its_receipt(tmp_path):
    need_real_messages()
    messages = [(T0 + k * 100 * MS, CANDIDATES, CANDS_TYPE, candidates([T0 + k * 100 * MS - 200 * MS], 10))
                for k in range(11)]
    consumer = report_of(write(tmp_path / "bag", messages))["consumer"]
    assert (consumer["held_ticks_max"], consumer["held_ticks_min"], consumer["held_time"]) == (1.0, 0.0, 0.0)
    wider = report_of(tmp_path / "bag", window_s=0.3)["consumer"]   # the window is the consumer's parameter
    assert wider["held_ticks_min"] == wider["held_time"] == 1.0


def test_receipts_closer_together_than_a_consumer_period_are_judged_on_the_phases_that_tick():
    """Six sets received within 75 ms (a replayed drive's burst: what CI's recording of the demo gave): a 10 Hz
    consumer's phases past 75 ms have no tick in that span and count for nothing, not a division by zero; the
    eight that tick find the newest set held (stamps 10 ms before each receipt)."""
    import numpy as np
    from hybrid_vla_ros.bench.seat.timing import held_share
    receive = T0 + np.arange(6, dtype=np.int64) * 15 * MS
    share = held_share(receive, receive - 10 * MS, np.ones(6, dtype=bool), hz=10.0, window_s=0.2, phases=10)
    assert share["held_ticks_min"] == share["held_ticks_max"] == share["held_time"] == 1.0
    assert share["ticks"] == 0.8    # ticks per phase, over every phase: 8 ticks in 10 phases
    stale = held_share(receive, receive - 300 * MS, np.ones(6, dtype=bool), hz=10.0, window_s=0.2, phases=10)
    assert stale["held_ticks_max"] == stale["held_time"] == 0.0


def test_a_sim_time_recording_is_judged_on_its_clock(tmp_path):
    """Received on the recorder's wall clock 10 ms after a /clock message, stamped on a sim clock 1000 s behind
    100 ms before that message's value: with /clock in the bag the ages are what a use_sim_time consumer reads,
    100 ms (its clock steps at each /clock), held 1/3 of the time; without it the stamps look 1000 s old, the
    share is 0 and a note says the two are not one clock."""
    need_real_messages()
    sim = -1000 * 1000 * MS
    sets = [(T0 + k * 300 * MS + 10 * MS, CANDIDATES, CANDS_TYPE, candidates([T0 + sim + k * 300 * MS - 100 * MS], 5))
            for k in range(10)]
    ticks = [(T0 - 50 * MS + k * 25 * MS, "/clock", "rosgraph_msgs/msg/Clock", clock(T0 + sim - 50 * MS + k * 25 * MS))
             for k in range(130)]
    with_clock = report_of(write(tmp_path / "with", sets + ticks))
    assert with_clock["clock"] == "/clock"
    assert with_clock["age_at_receipt_ms"]["min"] == with_clock["age_at_receipt_ms"]["max"] == 100.0
    consumer = with_clock["consumer"]
    assert (consumer["held_ticks_max"], consumer["held_ticks_min"], consumer["held_time"]) == (2 / 3, 1 / 3, 1 / 3)
    without = report_of(write(tmp_path / "without", sets))
    assert without["clock"] == "recorder" and without["consumer"]["held_time"] == 0.0
    assert any("not one clock" in note for note in without["notes"])


def test_damaged_and_empty_sets_are_counted_and_a_bag_without_candidates_is_one_clear_line(tmp_path, capsys):
    need_real_messages()
    good = [(T0 + k * 100 * MS, CANDIDATES, CANDS_TYPE, candidates([T0 + k * 100 * MS], 4)) for k in range(5)]
    bad = [(T0 + 510 * MS, CANDIDATES, CANDS_TYPE, b"\x00\x01\x00\x00\xff\xff\xff\xff"),
           (T0 + 520 * MS, CANDIDATES, CANDS_TYPE, candidates([], 0)),
           (T0 + 530 * MS, INFO, "diagnostic_msgs/msg/DiagnosticStatus", b"\x00\x01\x00\x00"),
           (T0 + 540 * MS, INFO, "diagnostic_msgs/msg/DiagnosticStatus", info(T0, T0, suffix_ms="fast"))]
    report = report_of(write(tmp_path / "bag", good + bad))
    assert report["sets"] == 6 and report["empty_sets"] == 1
    assert report["undecodable"] == {CANDIDATES: 1, INFO: 2}
    assert sum("did not decode" in note for note in report["notes"]) == 2
    assert report["candidates_per_set"]["min"] == 0 and report["points"]["n"] == 5
    from hybrid_vla_ros.cli import main
    path_only = write(tmp_path / "path", [(T0, "/plan", "nav_msgs/msg/Path", _path())])
    assert main(["seat-report", str(path_only)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hybrid-vla seat-report: error: the bag has no {CANDS_TYPE} or Trajectory topic; its topics: "
                   "{'/plan': 'nav_msgs/msg/Path'}"]
    assert main(["seat-report", str(tmp_path / "bag"), "--topic", "/plan"]) == 2
    assert "topic '/plan' is not a" in capsys.readouterr().err
    assert main(["seat-report", str(tmp_path / "bag"), "--consumer-hz", "0"]) == 2
    assert "need hz > 0" in capsys.readouterr().err


def _path():
    from nav_msgs.msg import Path
    from rclpy.serialization import serialize_message
    return serialize_message(Path())


def test_the_report_of_a_bag_the_demo_records(domain, tmp_path):
    """The demo's graph (drive_graph: what `hybrid-vla demo` runs) on the tiny model, candidates recorded: the
    report counts every set recorded, the model's 8 waypoints 0.5 s apart (4 s), the camera frame's stamp (the
    plan as predicted: output_retime false), and says the replayed drive's stamps are not on the recorder's clock."""
    need_real_messages()
    from rclpy.serialization import deserialize_message
    from autoware_internal_planning_msgs.msg import CandidateTrajectories
    from ros_harness import CAMERAS, TINY_OVERRIDES
    from hybrid_vla_ros.cli import main
    from hybrid_vla_ros.model.presets import get_preset
    from hybrid_vla_ros.ros.bags.storage import read_bag
    from hybrid_vla_ros.ros.demo import drive_graph, write_sample_drive
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params
    from hybrid_vla_ros.ros.topics import CANDIDATES_TOPIC, TRAJECTORY_TOPIC
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    topics = [f"{c}/compressed" for c in CAMERAS]
    overrides["hybrid_vla_prefix"].update(image_transport="compressed", camera_topics=topics)
    overrides["hybrid_vla_suffix"]["output_type"] = "auto"
    drive = write_sample_drive(tmp_path / "drive", "tiny", topics, frames=6)
    summary, _ = drive_graph(drive, graph_params(overrides=overrides), record_to=tmp_path / "out", settle_s=20)
    recorded = [deserialize_message(m.raw, CandidateTrajectories) for m in read_bag(tmp_path / "out")[0]
                if m.topic == CANDIDATES_TOPIC]
    assert main(["seat-report", str(tmp_path / "out"), "--json", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    spec = get_preset("tiny")
    assert report["topic"] == CANDIDATES_TOPIC and report["sets"] == len(recorded) == summary["trajectories"] == 6
    assert report["points"]["min"] == report["points"]["max"] == spec.num_waypoints
    assert report["horizon_s"]["min"] == report["horizon_s"]["max"] == spec.num_waypoints * spec.waypoint_dt_s
    assert report["spacing_s"]["median"] == spec.waypoint_dt_s
    assert report["stamp"]["convention"] == "the camera frame's stamp"
    assert report["stamp"]["source"] == "trajectory_info (6 of 6 sets)"
    assert any("not one clock" in note for note in report["notes"])
    assert main(["seat-report", str(tmp_path / "out"), "--topic", TRAJECTORY_TOPIC, "--json",
                 str(tmp_path / "t.json")]) == 0
    single = json.loads((tmp_path / "t.json").read_text())
    assert single["sets"] == 6 and single["points"] == report["points"] and single["horizon_s"] == report["horizon_s"]
