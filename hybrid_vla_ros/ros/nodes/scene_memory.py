"""The prefix's scene-encoder memory on the ROS side: the `~/reset_memory` service (std_srvs/Trigger) and its
diagnostics. The reset itself happens in the encoder's thread before the next frame (model/plugins/
scene_encoders.py SceneEncoder.request_reset); a stamp going back (a bag loop, /clock reset) resets it too."""

from __future__ import annotations


class SceneMemory:
    def __init__(self, node, encoder):
        """encoder: the prefix stage's scene encoder, or None (a vision-tower model: no service, no check)."""
        self.node, self.encoder, self.requests = node, encoder, 0
        if encoder is not None:
            # a configure starts from an empty memory (the model may come from the process's model cache, where
            # an earlier graph left its memory); resets are counted from here
            encoder.reset("configure")
            self.base_resets = encoder.resets
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
        return [("scene_memory", 0, f"{self.encoder.memory_length()} frames, "
                                    f"{self.encoder.resets - self.base_resets} resets (last: {reason})",
                 {"scene_encoder": self.encoder.plugin_name, "memory_length": str(self.encoder.memory_length()),
                  "memory_resets": str(self.encoder.resets - self.base_resets), "last_reset_reason": reason,
                  "last_reset_stamp_ns": str(stamp), "reset_requests": str(self.requests)})]


def has_scene_memory(prefix_params: dict) -> bool:
    """Whether the prefix of these parameters runs a scene encoder (and so serves ~/reset_memory)."""
    from ...model.checkpoint import SCENE_FILE
    from ...model.load import resolve_checkpoint
    from ...model.presets import get_preset
    checkpoint = prefix_params.get("model.checkpoint") or ""
    if checkpoint:
        from pathlib import Path
        return (Path(resolve_checkpoint(checkpoint)) / SCENE_FILE).is_file()
    return bool(get_preset(prefix_params.get("model.preset", "tiny")).scene_encoder)


def reset_scene_memory(node, spin, prefix_node: str = "hybrid_vla_prefix", timeout_s: float = 30.0) -> str:
    """Call the prefix's ~/reset_memory (a drive's readiness probe frames must not stay in the memory) ->
    its reply message; ConfigError when nobody answers within timeout_s."""
    import time
    from std_srvs.srv import Trigger
    from ...errors import ConfigError
    client = node.create_client(Trigger, f"/{prefix_node}/reset_memory")
    try:
        deadline = time.monotonic() + timeout_s
        while not client.service_is_ready() and time.monotonic() < deadline:
            spin(0.05)
        future = client.call_async(Trigger.Request()) if client.service_is_ready() else None
        while future is not None and not future.done() and time.monotonic() < deadline:
            spin(0.05)
        if future is None or not future.done():
            raise ConfigError(f"/{prefix_node}/reset_memory did not answer within {timeout_s:.0f} s")
        return future.result().message
    finally:
        node.destroy_client(client)
