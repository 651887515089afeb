"""Backbone families, one module per architecture behind one interface (base.Family) and a registry.
Every module of this folder is found and registered on first use; see base.py for how to add one."""

from .base import (ATTN_IMPL, Family, family_names, family_of_model_type, get_family, load_backbone_config,
                   register, spec_fields, supported_model_types)

__all__ = ["ATTN_IMPL", "Family", "family_names", "family_of_model_type", "get_family", "load_backbone_config",
           "register", "spec_fields", "supported_model_types"]
