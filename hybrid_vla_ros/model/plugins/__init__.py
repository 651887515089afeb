"""Plugins: scene encoders and waypoint heads, shipped here (by name in model/registry.py's table) or from
installed packages and module paths (found there too)."""

from ..registry import HEADS, SCENE_ENCODERS, plugin_class, plugin_names
from .heads import WaypointHead, head_config
from .scene_encoders import SceneEncoder

__all__ = ["HEADS", "SCENE_ENCODERS", "SceneEncoder", "WaypointHead", "head_config", "plugin_class",
           "plugin_names"]
