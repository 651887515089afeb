"""The prefix's scene-encoder memory on the ROS side: the `~/reset_memory` service (std_srvs/Trigger) and its
diagnostics. The reset itself happens in the encoder's thread before the next frame (model/plugins/
scene_encoders.py SceneEncoder.request_reset); a stamp going back (a bag loop, /clock reset) resets it too."""

from __future__ import annotations


class SceneMemory:
    def __init__(self, node, encoder):
        """encoder: the prefix stage's scene encoder, or None (a vision-tower model: no service, no check)."""
        self.node, self.encoder, self.requests = node, encoder, 0
        if encoder is not None:
            from std_srvs.srv import Trigger
            node.configured_service(Trigger, "~/reset_memory", self._on_reset)

    def _on_reset(self, request, response):
        self.encoder.request_reset("service")
        self.requests += 1
        response.success = True
        response.message = (f"scene memory ({self.encoder.memory_length()} frames) is reset before the next frame")
        return response

    def checks(self) -> list[tuple]:
        if self.encoder is None:
            return []
        reason, stamp = self.encoder.last_reset
        return [("scene_memory", 0, f"{self.encoder.memory_length()} frames, {self.encoder.resets} resets (last: "
                                    f"{reason})",
                 {"scene_encoder": self.encoder.plugin_name, "memory_length": str(self.encoder.memory_length()),
                  "memory_resets": str(self.encoder.resets), "last_reset_reason": reason,
                  "last_reset_stamp_ns": str(stamp), "reset_requests": str(self.requests)})]
