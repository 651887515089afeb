"""Cameras as cars have them, through the real graph: 1280x720 and 1920x1080 frames, raw and compressed,
published best effort by a camera driver in another process (the package's DDS profile carries them), give
one trajectory per frame, equal to the unsplit model on the same decoded images."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image

from camera_publisher import CAMERAS, message
from hybrid_vla_ros.engine.stages import reference_forward
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.ros import messages
from hybrid_vla_ros.types import EgoState, Frame
from ros_harness import Harness, wait_until

FRAMES = 3
PUBLISHER = Path(__file__).with_name("camera_publisher.py")


def expected_points(seq, height, width, kind, instruction):
    decode = messages.compressed_to_array if kind in ("jpeg", "png") else messages.image_to_array
    images = [decode(message(seq, cam, height, width, kind), "t") for cam in range(len(CAMERAS))]
    frame = Frame(images=images, seq=seq, ego=EgoState(), instruction=instruction)
    return reference_forward(load_vla(preset="tiny"), frame)[1].points


@pytest.mark.slow
@pytest.mark.parametrize("width,height,kind,exported", [(1280, 720, "rgb8", False), (1280, 720, "jpeg", True),
                                                        (1920, 1080, "bgr8", False), (1920, 1080, "png", False)])
def test_large_cameras_from_another_process_give_one_trajectory_per_frame(domain, tmp_path, width, height, kind,
                                                                          exported):
    """exported: the graph pointed at an HF checkpoint directory written by `export` (issue 9's done-when)."""
    compressed = kind in ("jpeg", "png")
    topics = [t + "/compressed" for t in CAMERAS] if compressed else CAMERAS
    overrides = {"hybrid_vla_prefix": {"camera_topics": topics, "image_transport": "compressed" if compressed
                                       else "raw"}}
    if exported:
        from hybrid_vla_ros.model.checkpoint import save_checkpoint
        save_checkpoint(load_vla(preset="tiny"), tmp_path / "ckpt", max_shard_size="60KB")
        for node in ("hybrid_vla_prefix", "hybrid_vla_suffix", "hybrid_vla_scheduler"):
            overrides.setdefault(node, {})["model.checkpoint"] = str(tmp_path / "ckpt")
    h = Harness(overrides)
    try:
        proc = subprocess.Popen([sys.executable, str(PUBLISHER), str(width), str(height), kind, str(FRAMES), "0.4"],
                                cwd=PUBLISHER.parent)
        assert wait_until(lambda: len(h.paths) == FRAMES or proc.poll() is not None, h.spin, 60)
        h.settle(0.5)
        assert proc.wait(30) == 0
        assert [int(i["seq"]) for i in h.infos] == list(range(FRAMES)), h.prefix.health.rejected
        assert not h.prefix.health.rejected
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in h.paths[-1].poses])
        reference = expected_points(FRAMES - 1, height, width, kind, h.prefix.params["instruction"])
        assert np.abs(xy - reference[:, :2]).max() <= 1e-5
        assert bool(getattr(h.suffix.model, "checkpoint_files", None)) == exported
    finally:
        h.close()


def test_wrong_encodings_and_corrupt_large_frames_are_refused_counted_and_the_next_is_served(domain):
    h = Harness()
    try:
        big = message(0, 0, 720, 1280, "rgb8")
        bad = [Image(height=720, width=1280, encoding="bayer_rggb8", step=1280, data=bytes(1280 * 720)),
               Image(height=720, width=1280, encoding="rgb8", step=3840, data=bytes(big.data)[:-3840])]
        for msg in bad:
            h.image_pubs[0].publish(msg)
        h.settle(0.5)
        rejected = dict(h.prefix.health.rejected)
        assert rejected.get("invalid_image") == 2, rejected
        for seq in range(2):
            for cam, pub in enumerate(h.image_pubs):
                pub.publish(message(seq, cam, 720, 1280, "rgb8"))
            assert wait_until(lambda: len(h.infos) == seq + 1, h.spin, 20)
    finally:
        h.close()


def test_a_corrupt_jpeg_is_refused_when_its_set_is_taken_and_counted(domain):
    compressed = [t + "/compressed" for t in CAMERAS]
    h = Harness({"hybrid_vla_prefix": {"camera_topics": compressed, "image_transport": "compressed"}})
    try:
        from rclpy.qos import qos_profile_sensor_data
        pubs = [h.node.create_publisher(CompressedImage, t, qos_profile_sensor_data) for t in compressed]
        wait_until(lambda: all(p.get_subscription_count() for p in pubs), h.spin, 10)
        good = [message(0, cam, 720, 1280, "jpeg") for cam in range(2)]
        good[1].data = bytes(good[1].data)[: len(good[1].data) // 3]                  # cut off mid-stream
        for pub, msg in zip(pubs, good):
            pub.publish(msg)
        assert wait_until(lambda: h.prefix.health.rejected.get("invalid_image") == 1, h.spin, 10)
        for cam, pub in enumerate(pubs):
            pub.publish(message(1, cam, 720, 1280, "jpeg"))
        assert wait_until(lambda: [int(i["seq"]) for i in h.infos] == [1], h.spin, 20)
    finally:
        h.close()


def test_the_large_frame_profile_applies_unless_the_user_chose_a_profile():
    from hybrid_vla_ros.ros.launch_support.dds import PROFILE, use_large_frame_profile
    for distro, name in (("jazzy", "FASTRTPS_DEFAULT_PROFILES_FILE"), ("humble", "FASTRTPS_DEFAULT_PROFILES_FILE"),
                         ("kilted", "FASTDDS_DEFAULT_PROFILES_FILE")):
        env = {"ROS_DISTRO": distro}
        assert "large-frame profile" in use_large_frame_profile(env) and PROFILE.is_file()
        assert env == {"ROS_DISTRO": distro, name: str(PROFILE)}  # only the name that Fast DDS reads
    mine = {"FASTRTPS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"}
    assert use_large_frame_profile(mine) == "user's FASTRTPS_DEFAULT_PROFILES_FILE='/etc/mine.xml'"
    assert mine == {"FASTRTPS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"}


def test_images_the_camera_synchroniser_drops_are_never_decoded(domain):
    h = Harness()
    try:
        for seq in range(3):                                     # camera 0 alone: no set forms
            h.image_pubs[0].publish(message(seq, 0, 720, 1280, "rgb8"))
        h.settle(0.5)
        assert h.prefix.camera_counts.decoded == 0
        for cam, pub in enumerate(h.image_pubs):                 # one complete set
            pub.publish(message(5, cam, 720, 1280, "rgb8"))
        assert wait_until(lambda: len(h.infos) == 1, h.spin, 20)
        assert h.prefix.camera_counts.decoded == 2 and h.prefix.sync.discarded >= 3
    finally:
        h.close()
