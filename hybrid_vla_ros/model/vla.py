"""The VLA module: an HF vision-language backbone plus an action head at the planning query token."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError, expect
from .action_tokens import ActionTokenizer, TokenHead
from .families import get_family
from .preprocess import ImageProcessing
from .prompt import BytePrompt
from .spec import VLASpec
from .tokens import MIN_VOCAB


class ActionHead(nn.Module):
    """Final hidden state at the [PLAN] token -> N waypoints (dx, dy, heading, speed)."""

    def __init__(self, hidden_size: int, head_hidden: int, num_waypoints: int):
        super().__init__()
        self.num_waypoints = num_waypoints
        self.mlp = nn.Sequential(nn.Linear(hidden_size, head_hidden), nn.GELU(),
                                 nn.Linear(head_hidden, num_waypoints * 4))

    def forward(self, query_hidden: torch.Tensor) -> torch.Tensor:
        raw = self.mlp(query_hidden)                      # (B, N*4)
        return raw.view(-1, self.num_waypoints, 4)        # (B, N, 4)


def waypoints_from_head(raw: torch.Tensor, dt_s: float) -> torch.Tensor:
    """(B, N, 4) head output -> (B, N, 5): x, y (cumulated steps), heading, speed, time_from_start."""
    xy = raw[..., :2].double().cumsum(dim=1)
    n = raw.shape[1]
    t = torch.arange(1, n + 1, dtype=torch.float64, device=raw.device).mul(dt_s).expand(raw.shape[0], n)
    return torch.cat([xy, raw[..., 2:4].double(), t.unsqueeze(-1)], dim=-1)


def make_action_head(spec: VLASpec) -> nn.Module:
    """The spec's head, freshly initialised: action-token logits over the bins, or the waypoint MLP."""
    if spec.action_head == "tokens":
        return TokenHead(spec.hidden_size, spec.action_bins)
    return ActionHead(spec.hidden_size, spec.head_hidden, spec.num_waypoints)


class VLAModel(nn.Module):
    """backbone_config: the HF config a checkpoint came with (exact rope, eps, ...); default: built from spec."""

    def __init__(self, spec: VLASpec, backbone_config=None):
        super().__init__()
        expect(spec.vocab_size >= MIN_VOCAB, ConfigError,
               f"spec '{spec.name}': vocab_size={spec.vocab_size}, expected >= {MIN_VOCAB} (bytes + specials)")
        self.spec = spec
        self.family = get_family(spec.family)
        self.image_processing = ImageProcessing.for_spec(spec)  # a checkpoint's preprocessor_config may change it
        self.prompt = BytePrompt()                                # a checkpoint's own tokenizer replaces it
        self.backbone = self.family.model_class(backbone_config or self.family.build_config(spec))
        self.action_head = make_action_head(spec)
        if spec.action_head == "tokens":
            self.action_tokenizer = ActionTokenizer(spec)

    @property
    def decoder(self):
        return self.family.language_model(self.backbone)

    @property
    def num_blocks(self) -> int:
        return len(self.decoder.layers)


def build_model(spec: VLASpec, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> VLAModel:
    """Seeded random weights (deterministic for a spec). device='meta' builds shapes only."""
    if str(device) == "meta":
        with torch.device("meta"):
            return VLAModel(spec).to(dtype).eval()
    expect(not spec.shape_only, ConfigError,
           f"preset '{spec.name}' is shape-only (real-model sizes); it answers `info` but cannot be materialised")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = VLAModel(spec)
    return model.to(device=device, dtype=dtype).eval()
