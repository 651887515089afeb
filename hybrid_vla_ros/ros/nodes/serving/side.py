"""What a kind's side of the graph offers the node (the protocol: ros/nodes/serving/__init__.py), with the defaults
of a side that has nothing of its own to say."""

from __future__ import annotations

SUFFIX_QUEUE = 64  # per frame: states waiting for a suffix node's worker (the limit of max_in_flight)


class Side:
    """What a side offers when it has nothing of its own to say."""
    node_inputs = True
    auto_device = None   # device auto: where its prefix runs (None: the node's default, a GPU when there is one)
    stage = worker = None

    def describe(self) -> str:
        return ""

    def time_limits(self) -> tuple[dict, list]:
        """Its deadlines for the prefix's `time_limits` check: values (a key ending _ms: seconds, or None for
        never), warnings."""
        return {}, []

    def checks(self) -> list:
        return []

    def activated(self) -> None:
        pass

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
