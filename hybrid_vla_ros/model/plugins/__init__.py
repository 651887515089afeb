"""Plugins: scene encoders and waypoint heads, shipped here or from installed packages (registry.py)."""

# the shipped plugins register themselves
from . import diffusion_head, driving_heads, heads, scene_encoders, vae_planners  # noqa: F401
from . import orion_front  # noqa: F401  (ORION's published front end: the `orion_front` scene encoder)
from . import alpamayo  # noqa: F401  (Alpamayo's action expert: the `alpamayo_expert` head)
from .heads import WaypointHead, head_config
from .registry import HEADS, SCENE_ENCODERS, plugin_class, plugin_names, register
from .scene_encoders import SceneEncoder

__all__ = ["HEADS", "SCENE_ENCODERS", "SceneEncoder", "WaypointHead", "head_config", "plugin_class",
           "plugin_names", "register"]
