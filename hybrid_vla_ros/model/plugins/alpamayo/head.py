"""The Alpamayo expert as a waypoint-head plugin (`alpamayo_expert`), so a preset carries its parameters on the
suffix side and `hybrid-vla info` counts them (the `alpamayo-r1-like` preset). head_config: `expert` (the
release's expert_cfg overrides of the VLM's text config) and `in_proj` (action_in_proj_cfg). It cannot run as a
head: it reads every layer's keys/values, not the query tokens' final states (reference.py runs a release
unsplit, engine/expert_split splits it at a cut with the expert's layers on both sides)."""

from __future__ import annotations

import torch
from torch import nn

from ....errors import ConfigError
from ..heads import WaypointHead
from .action_proj import in_proj_from
from .config import expert_config
from .expert import build_expert
from .model import ACTION_CHANNELS


class AlpamayoExpertHead(WaypointHead):

    def __init__(self, config: dict, text_config):
        super().__init__(config)
        expert = expert_config(text_config, config.get("expert", {}))
        self.expert = build_expert(expert)
        self.action_in_proj = in_proj_from(config.get("in_proj", {}), ACTION_CHANNELS, expert.hidden_size, True)
        self.action_out_proj = nn.Linear(expert.hidden_size, ACTION_CHANNELS)

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "AlpamayoExpertHead":
        if spec is None:
            raise ConfigError("head 'alpamayo_expert': needs the spec (its VLM's text config)")
        return cls(config, spec.backbone_config().text_config)

    def forward(self, query_hidden: torch.Tensor) -> torch.Tensor:
        raise ConfigError("head 'alpamayo_expert' reads the VLM's per-layer keys/values, not the query tokens' "
                          "states: run a release unsplit with hybrid_vla_ros.model.plugins.alpamayo.run_reference "
                          "or split at a cut with hybrid_vla_ros.engine.expert_split.run_split")
