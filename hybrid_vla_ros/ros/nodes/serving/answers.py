"""The prefix's one input for the suffix's answers, whatever the model: ~/input/action_tokens (TOKENS_QOS, reliable
and volatile), each message's bytes handed to `take`; one it refuses (HybridVLAError) is counted under `reason`
(an action-token model's invalid_tokens, an Alpamayo release's invalid_answer; a message in a format this release
no longer reads: old_message) and logged. Taken in any state:
they answer this node's own messages (frames in flight finish after a deactivate)."""

from __future__ import annotations

from std_msgs.msg import UInt8MultiArray

from ....errors import HybridVLAError
from ...topics import TOKENS_QOS


class AnswerInput:
    def __init__(self, node, take, reason: str):
        self.node, self.take, self.reason = node, take, reason
        self.subscription = node.configured_subscription(UInt8MultiArray, "~/input/action_tokens", self._on_answer,
                                                         TOKENS_QOS)

    def _on_answer(self, msg) -> None:
        try:
            self.take(bytes(msg.data))
        except HybridVLAError as exc:   # an old format keeps its own reason (old_message)
            self.node._reject(getattr(exc, "reason", None) or self.reason, exc)
