"""Backbone families, one module per architecture behind one interface (base.Family), found by name through the
package's one table (model/registry.py) and imported on first use; see base.py for how to add one."""

from ..registry import family_names, family_of_model_type, get_family, supported_model_types
from .backbone_config import load_backbone_config, spec_fields
from .base import ATTN_IMPL, Family, text_fields

__all__ = ["ATTN_IMPL", "Family", "family_names", "family_of_model_type", "get_family", "load_backbone_config",
           "spec_fields", "supported_model_types", "text_fields"]
