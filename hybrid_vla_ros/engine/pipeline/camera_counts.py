"""The prefix's camera image counts (ROS-free), reported in its diagnostics (ros/nodes/prefix_node.py)."""

from __future__ import annotations

import os


class CameraCounts:
    """Per camera: images its callback took (active or not) and the stamp of the last one; besides, images
    received while active and images decoded (only those of sets the worker took). One writer per topic keeps
    its order, so between two diagnostics of one process (`pid`) the bench knows exactly how many images of a
    stamp range DDS shed before the node saw them (bench/faults/accounting.py shed_by_dds: frames no node
    could report)."""

    def __init__(self, cameras: int):
        self.taken, self.last_ns = [0] * cameras, [-1] * cameras
        self.received = 0  # camera images the callbacks got (while active)
        self.decoded = 0   # camera images decoded: only those of sets the worker took

    def took(self, camera: int, stamp_ns: int, active: bool) -> None:
        self.taken[camera] += 1
        self.last_ns[camera] = stamp_ns
        if active:
            self.received += 1

    def values(self) -> dict[str, str]:
        """The counts as diagnostic values, with the process's pid: a respawned process counts from zero."""
        return {"images_decoded": str(self.decoded), "images_received": str(self.received), "pid": str(os.getpid()),
                **{f"images_taken.{c}": str(n) for c, n in enumerate(self.taken)},
                **{f"last_image_stamp_ns.{c}": str(t) for c, t in enumerate(self.last_ns)}}
