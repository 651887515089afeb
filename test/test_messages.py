"""Message conversion: images in (every supported encoding, every way they can be malformed), trajectories
out, boundary envelopes."""

import pathlib
import types

import numpy as np
import pytest
import torch
from geometry_msgs.msg import Pose
from nav_msgs.msg import Odometry, Path
from sensor_msgs.msg import CompressedImage, Image

from hybrid_vla_ros.types import BoundaryState, Trajectory
from hybrid_vla_ros.errors import InputError
from hybrid_vla_ros.ros import messages


def rgb(h=4, w=5):
    return np.arange(h * w * 3, dtype=np.uint8).reshape(h, w, 3)


def test_rgb8_round_trip():
    image = rgb()
    np.testing.assert_array_equal(messages.image_to_array(messages.array_to_image(image, Image()), "t"), image)


def test_bgr_rgba_mono_and_row_padding_are_converted_to_rgb():
    image = rgb()
    msg = Image(height=4, width=5, encoding="bgr8", step=16)  # 1 byte of row padding
    rows = np.zeros((4, 16), np.uint8)
    rows[:, :15] = image[..., ::-1].reshape(4, 15)
    msg.data = rows.tobytes()
    np.testing.assert_array_equal(messages.image_to_array(msg, "t"), image)
    rgba = np.concatenate([image, np.full((4, 5, 1), 255, np.uint8)], axis=2)
    msg = Image(height=4, width=5, encoding="rgba8", step=20, data=rgba.tobytes())
    np.testing.assert_array_equal(messages.image_to_array(msg, "t"), image)
    mono = Image(height=4, width=5, encoding="mono8", step=5, data=bytes(range(20)))
    assert messages.image_to_array(mono, "t").shape == (4, 5, 3)


def test_unknown_encoding_is_rejected_with_the_supported_list():
    msg = Image(height=4, width=5, encoding="bayer_rggb8", step=5, data=bytes(20))
    with pytest.raises(InputError, match=r"cam0: image encoding 'bayer_rggb8' is not supported; expected one of"):
        messages.image_to_array(msg, "cam0")


def bt601_yuv(image):
    """RGB -> (Y, U, V) float, BT.601 video range: the inverse of what cameras' 4:2:2 output is decoded with."""
    r, g, b = (image[..., i].astype(np.float64) for i in range(3))
    y = 16 + 0.257 * r + 0.504 * g + 0.098 * b
    return y, 128 - 0.148 * r - 0.291 * g + 0.439 * b, 128 + 0.439 * r - 0.368 * g - 0.071 * b


@pytest.mark.parametrize("encoding,order", [("yuv422", "UYVY"), ("uyvy", "UYVY"), ("yuv422_yuy2", "YUYV"),
                                            ("yuyv", "YUYV")])
def test_yuv422_cameras_decode_to_the_rgb_they_were_encoded_from(encoding, order):
    """Pixel pairs share their chroma (4:2:2): an image whose pairs have one colour survives to a level or two."""
    rng = np.random.default_rng(0)
    image = np.repeat(rng.integers(0, 256, (6, 4, 3), dtype=np.uint8), 2, axis=1)   # (6, 8, 3), pairs equal
    y, u, v = (np.clip(np.rint(c), 0, 255).astype(np.uint8) for c in bt601_yuv(image))
    planes = {"Y0": y[:, 0::2], "Y1": y[:, 1::2], "U": u[:, 0::2], "V": v[:, 0::2]}
    names = ("U", "Y0", "V", "Y1") if order == "UYVY" else ("Y0", "U", "Y1", "V")
    packed = np.stack([planes[n] for n in names], axis=-1).reshape(6, 16)
    rows = np.zeros((6, 20), np.uint8)                                               # 4 bytes of row padding
    rows[:, :16] = packed
    msg = Image(height=6, width=8, encoding=encoding, step=20, data=rows.tobytes())
    out = messages.image_to_array(msg, "cam")
    assert out.shape == (6, 8, 3) and np.abs(out.astype(int) - image).max() <= 2
    white = Image(height=1, width=2, encoding=encoding, step=4,
                  data=bytes([128, 235, 128, 235] if order == "UYVY" else [235, 128, 235, 128]))
    assert messages.image_to_array(white, "cam").tolist() == [[[255, 255, 255]] * 2]


def test_yuv422_needs_an_even_width_and_two_bytes_per_pixel():
    with pytest.raises(InputError, match="yuv422 needs an even width, got 5"):
        messages.image_to_array(Image(height=2, width=5, encoding="yuv422", step=10, data=bytes(20)), "cam")
    with pytest.raises(InputError, match=r"step 6 is smaller than width 4 x 2 bytes"):
        messages.image_to_array(Image(height=2, width=4, encoding="yuv422", step=6, data=bytes(12)), "cam")


def test_camera_images_of_any_size_decode_at_their_own_size():
    big = np.random.default_rng(1).integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    np.testing.assert_array_equal(messages.image_to_array(messages.array_to_image(big, Image()), "t"), big)
    out = messages.compressed_to_array(messages.array_to_compressed(big, CompressedImage(), "png"), "t")
    np.testing.assert_array_equal(out, big)


def test_truncated_image_data_is_rejected():
    msg = messages.array_to_image(rgb(), Image())
    msg.data = bytes(msg.data)[:-7]
    with pytest.raises(InputError, match=r"53 data bytes, expected step 15 x height 4 = 60 \(truncated image\?\)"):
        messages.image_to_array(msg, "cam")


def test_compressed_jpeg_and_png_decode_and_garbage_is_rejected():
    image = np.full((16, 16, 3), 128, np.uint8)
    for fmt in ("jpeg", "png"):
        out = messages.compressed_to_array(messages.array_to_compressed(image, CompressedImage(), fmt), "t")
        assert out.shape == (16, 16, 3) and abs(int(out.mean()) - 128) <= 2
    with pytest.raises(InputError, match="compressed image could not be decoded"):
        messages.compressed_to_array(CompressedImage(format="jpeg", data=b"not a jpeg"), "cam2")
    with pytest.raises(InputError, match="compressed format 'theora' is not supported"):
        messages.compressed_to_array(CompressedImage(format="theora", data=b"x"), "cam2")


def _blank_png(width: int, height: int) -> bytes:
    """A real, decodable PNG of zeros, streamed through zlib: a few hundred KB that decode to width x height x 3."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    deflate, row, body = zlib.compressobj(1), bytes(1 + 3 * width), []
    for _ in range(height):
        body.append(deflate.compress(row))
    body.append(deflate.flush())
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", b"".join(body)) + chunk(b"IEND", b"")


def test_a_small_png_declaring_tens_of_megapixels_is_refused_before_decoding():
    """8000 x 8000 in ~190 KB: decoded it is 192 MB per camera (below PIL's own bomb limit, so PIL decodes it)."""
    data = _blank_png(8000, 8000)
    assert len(data) < 1_000_000
    msg = CompressedImage(format="png", data=data)
    with pytest.raises(InputError, match=r"declares 8000x8000 = 64.0 MP, above max_image_megapixels 40"):
        messages.compressed_to_array(msg, "camera 0")
    small = messages.compressed_to_array(CompressedImage(format="png", data=_blank_png(64, 48)), "camera 0")
    assert small.shape == (48, 64, 3)
    with pytest.raises(InputError, match="above max_image_megapixels 0.001"):
        messages.compressed_to_array(CompressedImage(format="png", data=_blank_png(64, 48)), "camera 0", 1000)


def test_a_raw_image_above_the_pixel_limit_is_refused():
    msg = messages.array_to_image(np.zeros((40, 30, 3), np.uint8), Image())
    with pytest.raises(InputError, match=r"30x40 = 0.0 MP, above max_image_megapixels 0.001"):
        messages.image_to_array(msg, "camera 0", max_pixels=1000)


def test_odometry_gives_speed_and_yaw_rate():
    odom = Odometry()
    odom.twist.twist.linear.x, odom.twist.twist.angular.z = 4.5, -0.2
    ego = messages.odometry_to_ego(odom)
    assert (ego.speed_mps, ego.yaw_rate_rps) == (4.5, -0.2)


def trajectory():
    points = np.array([[1.0, 0.1, 0.0, 5.0, 0.5], [2.0, 0.3, np.pi / 2, 5.5, 1.0]])
    return Trajectory(points=points, seq=3, stamp_ns=1_500_000_000, partition=7)


def test_trajectory_to_path_keeps_positions_heading_and_stamp():
    msg = messages.trajectory_to_msg(trajectory(), Path, "path", "base_link")
    assert msg.header.frame_id == "base_link" and (msg.header.stamp.sec, msg.header.stamp.nanosec) == (1, 500_000_000)
    assert [(p.pose.position.x, p.pose.position.y) for p in msg.poses] == [(1.0, 0.1), (2.0, 0.3)]
    q = msg.poses[1].pose.orientation
    assert q.z == pytest.approx(np.sin(np.pi / 4)) and q.w == pytest.approx(np.cos(np.pi / 4))


AUTOWARE_MSGS = [pathlib.Path(__file__).resolve().parents[2] / "shared" / "autoware_msgs" / "autoware_planning_msgs"
                 / "msg", pathlib.Path("/work/shared/autoware_msgs/autoware_planning_msgs/msg")]


def upstream_fields(name: str) -> dict[str, str]:
    """field -> type of an upstream autoware_planning_msgs definition (rosbags parses the .msg file)."""
    from rosbags.typesys import get_types_from_msg
    folder = next((f for f in AUTOWARE_MSGS if f.is_dir()), None)
    if folder is None:
        pytest.skip("no upstream autoware_msgs definitions here (../shared/autoware_msgs)")
    parsed = get_types_from_msg((folder / f"{name}.msg").read_text(), f"autoware_planning_msgs/msg/{name}")
    fields = parsed[f"autoware_planning_msgs/msg/{name}"][1]
    return {field: str(kind) for field, kind in fields}


def autoware_classes():
    """Trajectory / TrajectoryPoint with exactly the upstream fields (Autoware's Python messages are not
    installable here): nested fields are the real ROS messages, numbers start at 0.0."""
    from builtin_interfaces.msg import Duration
    from geometry_msgs.msg import Pose as PoseMsg
    from std_msgs.msg import Header
    nested = {"time_from_start": Duration, "pose": PoseMsg, "header": Header}

    def make(name, fields):
        def init(self):
            for field in fields:
                setattr(self, field, [] if field == "points" else nested[field]() if field in nested else 0.0)

        def setattr_checked(self, field, value):
            assert field in fields, f"{name} has no field '{field}' upstream"
            object.__setattr__(self, field, value)
        return type(name, (), {"__init__": init, "__setattr__": setattr_checked, "__module__": module.__name__})

    module = types.ModuleType("upstream_autoware_planning_msgs.msg._trajectory")
    module.TrajectoryPoint = make("TrajectoryPoint", upstream_fields("TrajectoryPoint"))
    import sys
    sys.modules["upstream_autoware_planning_msgs.msg"] = module
    return make("Trajectory", upstream_fields("Trajectory")), module.TrajectoryPoint


def test_trajectory_to_the_upstream_autoware_layout_fills_acceleration():
    Trajectory_, _ = autoware_classes()
    msg = messages.trajectory_to_msg(trajectory(), Trajectory_, "autoware", "map")
    assert msg.header.frame_id == "map"
    assert [p.longitudinal_velocity_mps for p in msg.points] == [5.0, 5.5]
    assert [(p.time_from_start.sec, p.time_from_start.nanosec) for p in msg.points] == [(0, 500_000_000), (1, 0)]
    assert [p.acceleration_mps2 for p in msg.points] == [1.0, 1.0]  # (5.5 - 5.0) / 0.5 s
    assert msg.points[1].pose.position.x == 2.0
    assert {"acceleration_mps2", "heading_rate_rps", "front_wheel_angle_rad"} <= set(upstream_fields("TrajectoryPoint"))


def test_map_frame_points_are_rotated_by_the_yaw_and_moved_to_the_pose():
    import math
    from hybrid_vla_ros.types import Pose2D
    moved = trajectory().in_map(Pose2D(10.0, 5.0, math.pi / 2))
    np.testing.assert_allclose(moved[:, :2], [[10.0 - 0.1, 5.0 + 1.0], [10.0 - 0.3, 5.0 + 2.0]], atol=1e-9)
    np.testing.assert_allclose(moved[:, 2], trajectory().points[:, 2] + math.pi / 2)


def test_output_type_falls_back_to_path_and_says_why():
    import importlib.util
    cls, kind, reason = messages.resolve_trajectory_type("auto")
    if importlib.util.find_spec("autoware_planning_msgs"):
        assert kind == "autoware"
    else:
        assert (cls, kind) == (Path, "path") and "autoware_planning_msgs not importable" in reason


def test_an_explicitly_requested_autoware_type_that_is_missing_is_refused():
    import importlib.util
    if importlib.util.find_spec("autoware_auto_planning_msgs"):
        assert messages.resolve_trajectory_type("autoware_auto")[1] == "autoware_auto"
    else:
        with pytest.raises(InputError, match="output_type 'autoware_auto': no trajectory message type importable"):
            messages.resolve_trajectory_type("autoware_auto")
