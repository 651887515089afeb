"""The Fast DDS segments a killed participant leaves in /dev/shm are reclaimed; a live participant's are not
(ros/launch_support/dds.py; docs/RELIABILITY.md: one suite left 4.3 GB of them)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybrid_vla_ros.ros.launch_support.dds import PARTICIPANT_SEGMENT, SHM_DIR, reclaim_dead_participant_segments

pytest.importorskip("rclpy")

PARTICIPANT = """
import sys, time, rclpy
from std_msgs.msg import String
rclpy.init()
node = rclpy.create_node('segment_holder')
node.create_publisher(String, 'segment_probe', 10)
print('up', flush=True)
sys.stdin.readline()
"""


def participant_segments() -> set[str]:
    return {p.name for p in SHM_DIR.glob("fastdds_*") if PARTICIPANT_SEGMENT.fullmatch(p.name)}


def start_participant(env) -> tuple[subprocess.Popen, set[str]]:
    """A real rclpy participant (the package's DDS profile: its SHM segment) -> (process, segments it made)."""
    before = participant_segments()
    proc = subprocess.Popen([sys.executable, "-c", PARTICIPANT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout.readline().strip() == "up"
    deadline = time.monotonic() + 10
    while not participant_segments() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, participant_segments() - before


@pytest.mark.skipif(not SHM_DIR.is_dir(), reason="no /dev/shm on this host")
def test_a_killed_participants_segments_are_reclaimed_and_a_live_ones_kept():
    env = dict(os.environ)
    killed, killed_segments = start_participant(env)
    live, live_segments = start_participant(env)
    try:
        assert killed_segments and live_segments, "the participants made no SHM segment (profile not applied?)"
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=10)
        assert killed_segments <= participant_segments(), "a SIGKILLed participant's segments stay (the leak)"
        assert not set(reclaim_dead_participant_segments()) & killed_segments, "reclaimed inside the start grace"
        removed = set(reclaim_dead_participant_segments(grace_s=0.0))
        assert killed_segments <= removed
        assert not killed_segments & participant_segments()
        assert not any(Path(SHM_DIR, name + "_el").exists() for name in killed_segments)
        assert not removed & live_segments and live_segments <= participant_segments()
    finally:
        for proc in (killed, live):
            if proc.poll() is None:
                proc.stdin.close()
                proc.wait(timeout=20)
