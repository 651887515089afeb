"""One frame, one drop (docs/RELIABILITY.md): a camera set the prefix does not take is counted once, with its
stamp, on the same counter and `~/debug/dropped_frames` topic as every other lost frame, however many cameras
it has."""

import pytest

from hybrid_vla_ros.engine.pipeline.camera_sync import CameraSync

from ros_harness import Harness, wait_until

MS = 1_000_000


def test_the_images_of_one_incomplete_camera_set_are_one_drop_with_its_stamp():
    """Three cameras, the third misses t = 100 ms: its two images go when t = 200 ms completes (before: two
    drops for one frame). An unmatched set falling out of the buffers is one drop too."""
    heard = []
    sync = CameraSync(3, 20 * MS, depth=4, on_discard=heard.append)
    sync.add(0, 100 * MS, "a0")
    sync.add(1, 100 * MS, "a1")
    sync.add(0, 200 * MS, "b0")
    sync.add(1, 200 * MS, "b1")
    assert sync.add(2, 200 * MS, "b2") == (["b0", "b1", "b2"], 200 * MS)
    assert heard == [100 * MS] and sync.discarded == 2   # images discarded, one frame lost
    for k in range(3, 8):   # camera 2 is silent: sets 300..700 ms wait; 300 falls out of both buffers
        sync.add(0, k * 100 * MS, f"{k}0")
        sync.add(1, k * 100 * MS, f"{k}1")
    assert heard == [100 * MS, 300 * MS] and sync.discarded == 4


@pytest.mark.slow
def test_an_inactive_prefix_counts_one_drop_per_camera_set_with_its_stamp(domain):
    """Before: two drops per two-camera frame, without a stamp, never on ~/debug/dropped_frames."""
    from diagnostic_msgs.msg import DiagnosticStatus
    h = Harness()
    try:
        lost = []
        h.node.create_subscription(DiagnosticStatus, "/hybrid_vla_prefix/debug/dropped_frames",
                                   lambda m: lost.append({kv.key: kv.value for kv in m.values}), 50)
        assert wait_until(lambda: h.prefix.lost_pub.get_subscription_count() > 0, h.spin, 10)
        h.prefix.trigger_deactivate()
        stamps = [777_000_000_000 + seq * 100 * MS for seq in range(3)]   # ours (another test's may come too)
        for seq, stamp in enumerate(stamps):
            h.publish_images(h.frame(seq).images, stamp)
        ours = lambda: [(m["kind"], m["reason"], int(m["stamp_ns"])) for m in lost if int(m["stamp_ns"]) in stamps]
        assert wait_until(lambda: len(ours()) >= 3, h.spin, 5), h.prefix.health.drop_reasons
        h.settle(0.3)
        assert ours() == [("dropped", "inactive", stamp) for stamp in stamps]
        assert h.prefix.health.dropped == len(lost), (h.prefix.health.drop_reasons, lost)   # each one, stamped
    finally:
        h.close()


@pytest.mark.slow
def test_a_loss_reported_before_a_reader_matched_still_reaches_it(domain):
    """~/debug/dropped_frames keeps its last reports for a late reader (transient local): a node's writer and a
    reader match separately, and a frame lost just after start-up or a respawn was reported to nobody yet, so an
    observer accounting for every frame (bench --scenario faults) saw it lost silently (issue 50)."""
    from diagnostic_msgs.msg import DiagnosticStatus
    from hybrid_vla_ros.ros.topics import LOST_QOS
    h = Harness()
    try:
        h.prefix.trigger_deactivate()
        stamp = 888_000_000_000
        h.publish_images(h.frame(0).images, stamp)
        assert wait_until(lambda: h.prefix.health.drop_reasons.get("inactive", 0) >= 1, h.spin, 10)
        lost = []   # a reader that comes after the report was sent
        h.node.create_subscription(DiagnosticStatus, "/hybrid_vla_prefix/debug/dropped_frames",
                                   lambda m: lost.append({kv.key: kv.value for kv in m.values}), LOST_QOS)
        assert wait_until(lambda: any(int(m["stamp_ns"]) == stamp for m in lost), h.spin, 10), lost
    finally:
        h.close()


@pytest.mark.slow
def test_a_burst_of_loss_reports_reaches_a_reader_that_was_busy_meanwhile(domain):
    """A suffix's takeover reports up to two queues of frames at once (the frames that do not fit, then the stalest
    refused as too old). At a depth of 50 a reader whose executor was busy during the burst kept the newest 50
    of them: in a loaded run of the warm-standby kill test the 7 reported first reached no observer, and the
    accounting found them lost silently (issue 50). 300 reports while the reader does not spin all arrive."""
    from diagnostic_msgs.msg import DiagnosticStatus
    from hybrid_vla_ros.ros.topics import LOST_QOS
    h = Harness()
    try:
        lost = []
        h.node.create_subscription(DiagnosticStatus, "/hybrid_vla_prefix/debug/dropped_frames",
                                   lambda m: lost.append(int(dict((kv.key, kv.value) for kv in m.values)["stamp_ns"])),
                                   LOST_QOS)
        assert wait_until(lambda: h.prefix.lost_pub.get_subscription_count() > 0, h.spin, 10)
        stamps = [555_000_000_000 + i * MS for i in range(300)]
        for stamp in stamps:   # one burst, nothing spun meanwhile: the reader's callbacks wait
            h.prefix.health.drop("queue_full", stamp)
        assert wait_until(lambda: set(stamps) <= set(lost), h.spin, 10), f"{len(set(stamps) & set(lost))} of 300"
    finally:
        h.close()
