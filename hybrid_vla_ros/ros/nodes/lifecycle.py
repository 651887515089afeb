"""The lifecycle the three nodes share (ros2/demos lifecycle_py): `ManagedNode`'s transitions and `bring_up`."""

from __future__ import annotations

from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn

class ManagedNode(LifecycleNode):
    """The transitions the three nodes share: `active` follows activate/deactivate (then `activated()`),
    cleanup and shutdown call `_release()`, which frees what on_configure made; so does destroy_node."""

    active = False
    failure: str | None = None   # why the last configure failed (None: it did not)

    def configure_failed(self, exc: Exception) -> TransitionCallbackReturn:
        """A configure that cannot complete: the reason logged and kept (bring_up_all reports it)."""
        self.failure = str(exc)
        self.get_logger().error(f"configure failed: {exc}")
        return TransitionCallbackReturn.FAILURE

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_activate(state)  # activates lifecycle publishers
        self.active = True
        self.activated()
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def destroy_node(self):
        self._release()
        return super().destroy_node()

    def activated(self) -> None:
        """Called once active (the scheduler publishes its partition here)."""

    def _release(self) -> None:
        raise NotImplementedError


def bring_up(node) -> bool:
    """unconfigured -> inactive -> active when the node's `autostart` parameter says so. -> False when a
    transition failed (the node is left unconfigured; its log says why)."""
    return not bring_up_all([node])


def bring_up_all(nodes) -> dict[str, str]:
    """Configure the nodes whose `autostart` says so, in the order given (the prefix first: it places the
    shared blocks before the suffix decides on copies), then activate them receivers first (reversed), so
    no node sends to one that is not yet listening. A configure that fails ends the bring-up: the nodes
    configured before it are cleaned up again and none is activated (never half a graph running).
    -> node name -> why it did not come up (empty: every chosen node is active)."""
    chosen = [n for n in nodes if n.params["autostart"]]
    for i, node in enumerate(chosen):
        node.failure = None
        if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            for done in reversed(chosen[:i]):
                done.trigger_cleanup()
            return {node.get_name(): node.failure or "configure failed"}
    failed = {}
    for node in reversed(chosen):
        if node.trigger_activate() != TransitionCallbackReturn.SUCCESS:
            failed[node.get_name()] = "activate failed"
    return failed
