"""Plugins: scene encoders and waypoint heads, shipped here or from installed packages (registry.py)."""

from . import diffusion_head, driving_heads, heads, scene_encoders  # noqa: F401  (the shipped plugins register themselves)
from .heads import WaypointHead, head_config
from .registry import HEADS, SCENE_ENCODERS, plugin_class, plugin_names, register
from .scene_encoders import SceneEncoder

__all__ = ["HEADS", "SCENE_ENCODERS", "SceneEncoder", "WaypointHead", "head_config", "plugin_class",
           "plugin_names", "register"]
