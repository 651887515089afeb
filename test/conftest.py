import os

import pytest

# DDS stays on loopback in every test; each test module gets its own domain (see ros tests).
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Camera frames of real sizes between processes: the package's DDS profile, as its own programs use it
# (the test's helper processes and rclpy contexts inherit it).
from hybrid_vla_ros.ros.launch_support.dds import use_large_frame_profile  # noqa: E402

use_large_frame_profile()


@pytest.fixture
def domain(monkeypatch):
    """A DDS domain of this test's own (sequential: no stale participant of an earlier test answers), on
    loopback."""
    from ros_harness import domain_id
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain_id()))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")


@pytest.fixture
def context(domain):
    """An rclpy context of this test's own, on its own domain, shut down after it."""
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    yield context
    rclpy.shutdown(context=context)


@pytest.fixture(scope="session")
def tiny_models():
    """One instance per family, built once (a few tens of ms each)."""
    from hybrid_vla_ros.model.load import load_vla
    return {name: load_vla(preset=name) for name in ("tiny", "tiny-qwen2.5", "tiny-llava", "tiny-qwen3vl", "tiny-internvl")}


def fresh_model(name="tiny"):
    from hybrid_vla_ros.model.load import load_vla
    return load_vla(preset=name)
