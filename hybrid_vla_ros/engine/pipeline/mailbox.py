"""A stage worker's input buffer (ROS-free): `latest` keeps the newest item only, `lossless` a bounded FIFO."""

from __future__ import annotations

import threading

STOP = object()   # what take() returns once the mailbox is closed and empty


class Mailbox:
    """The input buffer. latest: capacity 1, newest wins. lossless: bounded FIFO, put blocks."""

    def __init__(self, policy: str, capacity: int):
        self.policy = policy
        self.capacity = 1 if policy == "latest" else capacity
        self.items: list = []
        self.cond = threading.Condition()
        self.closed = False

    def put(self, item, timeout_s: float):
        """Returns the item it displaced (latest policy) or None."""
        with self.cond:
            if self.policy == "latest":
                displaced = self.items.pop() if self.items else None
                self.items.append(item)
                self.cond.notify_all()
                return displaced
            if not self.cond.wait_for(lambda: len(self.items) < self.capacity or self.closed, timeout_s):
                raise TimeoutError(f"pipeline input full for {timeout_s} s (lossless back-pressure)")
            self.items.append(item)
            self.cond.notify_all()
            return None

    def room(self) -> int:
        """Items a put takes now without waiting (latest: always 1, it displaces)."""
        with self.cond:
            return 1 if self.policy == "latest" else self.capacity - len(self.items)

    def take(self):
        with self.cond:
            self.cond.wait_for(lambda: self.items or self.closed)
            if not self.items:
                return STOP
            item = self.items.pop(0)
            self.cond.notify_all()
            return item

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
