"""The lifecycle the three nodes share (ros2/demos lifecycle_py): `ManagedNode`'s transitions and `bring_up`."""

from __future__ import annotations

from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn

class ManagedNode(LifecycleNode):
    """The transitions the three nodes share: `active` follows activate/deactivate (then `activated()`),
    cleanup and shutdown call `_release()`, which frees what on_configure made; so does destroy_node."""

    active = False

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
    """unconfigured -> inactive -> active when the node's `autostart` parameter says so. -> active?"""
    if not node.params["autostart"]:
        return False
    node.trigger_configure()
    node.trigger_activate()
    return True
