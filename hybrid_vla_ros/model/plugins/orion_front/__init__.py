"""ORION's / MindDrive's published perception front end as the `orion_front` scene encoder (encoder.py)."""

from .encoder import OrionFrontEnd

__all__ = ["OrionFrontEnd"]
