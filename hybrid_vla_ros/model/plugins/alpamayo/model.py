"""An Alpamayo release as one module, its parameters named as the released safetensors name them:
`vlm.*` (Qwen3VLForConditionalGeneration: `vlm.model.visual.*`, `vlm.model.language_model.*`, `vlm.lm_head.*`),
`expert.*`, `action_in_proj.*`, `action_out_proj.*`, and the action space's statistics `action_space.*`. Alpamayo 2
Super saves the last four inside its ExpertModel (`expert.expert.*`, `expert.action_in_proj.*`, ...): `file_key`."""

from __future__ import annotations

import torch
from torch import nn

from ....errors import ConfigError
from .action_proj import in_proj_from
from .action_space import UnicycleActionSpace
from .config import AlpamayoConfig
from .expert import build_expert

ACTION_CHANNELS = 2   # acceleration, curvature
# Alpamayo 2 Super's ExpertModel holds the expert's LLM and its projections: our name -> its file's
NESTED = (("expert.", "expert.expert."), ("action_in_proj.", "expert.action_in_proj."),
          ("action_out_proj.", "expert.action_out_proj."), ("action_space.", "expert.action_space."))


class AlpamayoModel(nn.Module):
    kind = "alpamayo"   # how the graph serves it (ros/nodes/serving/alpamayo): a conversation of crossings a frame

    def __init__(self, config: AlpamayoConfig):
        super().__init__()
        from transformers.models.qwen3_vl import Qwen3VLForConditionalGeneration
        self.config = config
        self.vlm = Qwen3VLForConditionalGeneration(config.vlm)
        self.expert = build_expert(config.expert)
        hidden = config.expert.hidden_size
        # Alpamayo 1 saves the Fourier frequencies; 1.5 registers them non-persistent
        self.action_in_proj = in_proj_from(config.in_proj, ACTION_CHANNELS, hidden,   # 1.5: non-persistent
                                           persistent_freqs=config.model_type != "alpamayo1_5")
        self.action_out_proj = nn.Linear(hidden, ACTION_CHANNELS)
        self.action_space = UnicycleActionSpace(config.action_space)

    @property
    def spec(self):
        """Not a VLAModel: the engine's stages and the `hybrid-vla` commands built on them ask for a spec."""
        raise ConfigError(f"an {self.config.release} release loads as its own model and runs unsplit "
                          f"(hybrid_vla_ros.model.plugins.alpamayo.run_reference) or split at a cut "
                          f"(hybrid_vla_ros.engine.expert_split.run_split), and the prefix and suffix nodes serve it "
                          f"as their own kind (ros/nodes/serving/alpamayo/); `hybrid-vla verify` checks its split at "
                          f"every cut; the block-split stages and the hybrid-vla commands built on them do not take "
                          f"it (issue 39). For its shapes: hybrid-vla info --preset alpamayo-r1-like")

    @property
    def num_blocks(self) -> int:
        """The VLM's blocks: the cuts of a split (engine/expert_split) are 0 .. num_blocks."""
        return self.config.vlm.text_config.num_hidden_layers

    @property
    def expert_dtype(self) -> torch.dtype:
        return self.action_out_proj.weight.dtype

    @property
    def image_token_id(self) -> int:
        return int(self.config.vlm.image_token_id)

    def file_key(self, name: str) -> str:
        """A parameter's or buffer's name in the release's safetensors."""
        if self.config.model_type == "alpamayo2_super":
            for ours, theirs in NESTED:
                if name.startswith(ours):
                    return theirs + name[len(ours):]
        return name

    def published_keys(self) -> set[str]:
        """The tensors a release's safetensors hold for this config (their names there)."""
        return {self.file_key(name) for name in self.state_dict()}
