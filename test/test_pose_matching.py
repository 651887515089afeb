"""A frame's kinematic state and map pose by stamp (engine/pipeline/camera_sync.py StampedHistory): the
nearest sample within the skew, interpolated where two bracket the stamp, never merely the first inside it."""

import math

import pytest

from hybrid_vla_ros.engine.pipeline.camera_sync import StampedHistory
from hybrid_vla_ros.types import EgoState, Pose2D

MS = 1_000_000


def test_the_nearest_sample_is_taken_not_the_first_inside_the_skew():
    history = StampedHistory()
    for stamp, speed in ((-45, 1.0), (-2, 2.0), (30, 3.0)):
        history.add(stamp * MS, EgoState(speed, 0.0))
    value, matched = history.match(0, 50 * MS)
    assert matched and value.speed_mps == 2.0


def test_two_samples_that_bracket_the_stamp_are_interpolated():
    history = StampedHistory(between=Pose2D.between)
    history.add(-40 * MS, Pose2D(0.0, 0.0, 0.0))
    history.add(10 * MS, Pose2D(10.0, -5.0, 0.5))
    pose, matched = history.match(0, 50 * MS)
    assert matched
    assert (pose.x, pose.y, pose.yaw) == pytest.approx((8.0, -4.0, 0.4))


def test_yaw_is_interpolated_the_short_way_round():
    mid = Pose2D.between(Pose2D(0, 0, math.pi - 0.1), Pose2D(0, 0, -math.pi + 0.1), 0.5)
    assert abs(abs(mid.yaw) - math.pi) < 1e-9


def test_a_sample_outside_the_skew_is_returned_unmatched_and_an_empty_history_gives_none():
    history = StampedHistory(between=EgoState.between)
    assert history.match(0, 50 * MS) == (None, False)
    history.add(-200 * MS, EgoState(4.0, 0.0))
    value, matched = history.match(0, 50 * MS)
    assert not matched and value.speed_mps == 4.0


def test_only_one_side_within_the_skew_is_not_extrapolated():
    history = StampedHistory(between=EgoState.between)
    history.add(-300 * MS, EgoState(0.0, 0.0))
    history.add(20 * MS, EgoState(6.0, 0.0))
    value, matched = history.match(0, 50 * MS)
    assert matched and value.speed_mps == 6.0


def test_frames_wait_for_their_state_in_order_without_blocking_the_caller():
    import time
    from hybrid_vla_ros.engine.pipeline.camera_sync import WaitForState
    from hybrid_vla_ros.types import Frame
    history, out = StampedHistory(), []
    gate = WaitForState(history, 50 * MS, wait_s=0.2, forward=lambda frame: out.append(frame.seq))
    frames = [Frame(images=[], seq=i, stamp_ns=(i + 1) * 100 * MS) for i in range(3)]
    t0 = time.monotonic()
    for frame in frames:
        gate.add(frame)
    assert time.monotonic() - t0 < 0.05 and out == []          # nothing waited on the caller's thread
    history.add(200 * MS, EgoState(1.0, 0.0))                  # frame 1's state is in, frame 0's is not
    gate.poll()
    assert out == []                                           # frame 1 keeps its place behind frame 0
    history.add(100 * MS, EgoState(1.0, 0.0))
    gate.poll()
    assert out == [0, 1]
    time.sleep(0.25)                                           # frame 2's state never comes: it goes on anyway
    gate.poll()
    assert out == [0, 1, 2] and gate.clear() == []
