"""Scene encoders: a frame's cameras and ego state -> scene tokens of the LLM's width, spliced at the prompt's
image placeholders (the ORION / MindDrive front end). An encoder may keep cross-frame memory; it runs in the
prefix, one frame at a time, in frame order.

The interface a plugin implements (subclass SceneEncoder; docs/CHECKPOINTS.md, "Writing your own scene encoder
and head", says what each argument holds):
    from_config(config, hidden_size, spec)   -> an instance; `config` is the spec's scene_config (JSON-able,
                                                saved in scene_encoder.safetensors' metadata)
    tokens_for(config)                       (classmethod) scene tokens per frame of that config: the prompt is
                                                laid out from it before any encoder exists (`num_tokens`, an
                                                instance attribute, is for the plugin's own use only)
    forward(images (N, 3, H, W), ego (2,), stamp_ns) -> (tokens_for(config), hidden_size)
    reset_memory(), memory_length()          its cross-frame state (none: the defaults)
`encode()` (not to override) runs forward in frame order: a stamp going back (a bag loop, /clock reset)
resets the memory first; every reset is counted with its reason.

`QueryScene` is the reference to copy: learnable scene queries cross-attending to a small ViT's patch features
of every camera, plus history queries attending to a FIFO of past frames' scene queries, each keyed by the
ego motion since (the ORION / MindDrive shape at toy size).
"""

from __future__ import annotations

from collections import deque

import torch
from torch import nn
from torch.nn import functional as F

from ...errors import ConfigError, expect
from .registry import SCENE_ENCODERS, register


class SceneEncoder(nn.Module):
    plugin_name = ""
    num_tokens = 0

    def __init__(self, config: dict):
        super().__init__()
        self.config = dict(config)
        self.last_stamp_ns: int | None = None
        self.resets = 0
        self.last_reset = ("never", 0)   # (reason, stamp of the frame it happened before)
        self._pending_reset: str | None = None

    @classmethod
    def tokens_for(cls, config: dict) -> int:
        """Scene tokens per frame of an encoder of this config (the prompt is laid out before it is built)."""
        raise NotImplementedError

    def forward(self, images: torch.Tensor, ego: torch.Tensor, stamp_ns: int) -> torch.Tensor:
        raise NotImplementedError

    def reset_memory(self) -> None:
        """Forget every past frame (an encoder without memory has nothing to forget)."""

    def memory_length(self) -> int:
        return 0

    def request_reset(self, reason: str) -> None:
        """From another thread (a service): the memory is reset before the next frame, in the encoder's own
        thread, never in the middle of one."""
        self._pending_reset = reason

    def reset(self, reason: str, stamp_ns: int = 0) -> None:
        self.reset_memory()
        self.last_stamp_ns = None
        self.resets += 1
        self.last_reset = (reason, stamp_ns)

    def encode(self, images: torch.Tensor, ego: torch.Tensor, stamp_ns: int) -> torch.Tensor:
        """One frame, in order: a stamp before the last one (time went back) resets the memory first."""
        pending, self._pending_reset = self._pending_reset, None
        if pending is not None:
            self.reset(pending, stamp_ns)
        elif self.last_stamp_ns is not None and stamp_ns < self.last_stamp_ns:
            self.reset("time_jump", stamp_ns)
        tokens = self.forward(images, ego, stamp_ns)
        self.last_stamp_ns = stamp_ns
        return tokens


def attention(q_in: torch.Tensor, kv_in: torch.Tensor, proj: nn.ModuleDict, heads: int) -> torch.Tensor:
    """Multi-head attention of q_in (Lq, D) over kv_in (Lk, D) -> (Lq, D)."""
    d = q_in.shape[-1]
    q = proj["q"](q_in).view(-1, heads, d // heads).transpose(0, 1)                   # (heads, Lq, d/h)
    k = proj["k"](kv_in).view(-1, heads, d // heads).transpose(0, 1)
    v = proj["v"](kv_in).view(-1, heads, d // heads).transpose(0, 1)
    return proj["o"](F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(-1, d))


def attention_proj(width: int) -> nn.ModuleDict:
    return nn.ModuleDict({name: nn.Linear(width, width) for name in ("q", "k", "v", "o")})


class Block(nn.Module):
    """Pre-norm attention (self when kv is None, else cross) + MLP."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm_q, self.norm_kv, self.norm_mlp = nn.LayerNorm(width), nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = attention_proj(width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x: torch.Tensor, kv: torch.Tensor | None = None) -> torch.Tensor:
        q = self.norm_q(x)
        x = x + attention(q, q if kv is None else self.norm_kv(kv), self.attn, self.heads)
        return x + self.mlp(self.norm_mlp(x))


QUERY_SCENE_KEYS = ("patch_size", "image_height", "image_width", "cameras", "width", "depth", "heads",
                    "scene_queries", "history_queries", "memory_frames")


@register(SCENE_ENCODERS, "query_scene")
class QueryScene(SceneEncoder):

    def __init__(self, config: dict, hidden_size: int):
        super().__init__(config)
        c = config
        width, patches = c["width"], (c["image_height"] // c["patch_size"]) * (c["image_width"] // c["patch_size"])
        self.num_tokens = c["scene_queries"] + c["history_queries"]
        self.patch = nn.Conv2d(3, width, c["patch_size"], stride=c["patch_size"])
        self.position = nn.Parameter(torch.randn(1, patches, width) * 0.02)
        self.camera = nn.Parameter(torch.randn(c["cameras"], 1, width) * 0.02)
        self.vit = nn.ModuleList(Block(width, c["heads"]) for _ in range(c["depth"]))
        self.scene_queries = nn.Parameter(torch.randn(c["scene_queries"], width) * 0.02)
        self.history_queries = nn.Parameter(torch.randn(c["history_queries"], width) * 0.02)
        self.ego = nn.Linear(2, width)       # speed, yaw rate -> added to the scene queries
        self.motion = nn.Linear(2, width)    # distance and turn since a remembered frame -> its keys
        self.scene, self.history = Block(width, c["heads"]), Block(width, c["heads"])
        self.out = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, hidden_size))
        self.memory: deque = deque(maxlen=c["memory_frames"])   # (scene queries (Q, D), ego (2,), stamp_ns)

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "QueryScene":
        missing = [k for k in QUERY_SCENE_KEYS if not isinstance(config.get(k), int) or config[k] < 1]
        expect(not missing, ConfigError, f"scene encoder 'query_scene': {missing} must be positive integers "
                                         f"(config {config})")
        expect(config["width"] % config["heads"] == 0, ConfigError,
               f"scene encoder 'query_scene': width {config['width']} not divisible by heads {config['heads']}")
        return cls(config, hidden_size)

    @classmethod
    def tokens_for(cls, config: dict) -> int:
        return int(config.get("scene_queries", 0)) + int(config.get("history_queries", 0))

    def forward(self, images: torch.Tensor, ego: torch.Tensor, stamp_ns: int) -> torch.Tensor:
        patches = self.patch(images).flatten(2).transpose(1, 2)                        # (N, P, D)
        patches = patches + self.position + self.camera[: images.shape[0]]
        x = patches.reshape(-1, patches.shape[-1])                                     # (N P, D) all cameras
        for block in self.vit:
            x = block(x)
        scene = self.scene(self.scene_queries + self.ego(ego), x)                      # (Q, D)
        keys = [scene] + [past + self.motion(self._motion(ego, past_ego, stamp_ns - past_stamp))
                          for past, past_ego, past_stamp in self.memory]
        history = self.history(self.history_queries, torch.cat(keys))                  # (Hq, D)
        self.memory.append((scene.detach().clone(), ego.clone(), stamp_ns))
        return self.out(torch.cat([scene, history]))                                   # (Q + Hq, hidden)

    @staticmethod
    def _motion(ego: torch.Tensor, past_ego: torch.Tensor, dt_ns: int) -> torch.Tensor:
        dt = dt_ns * 1e-9
        return torch.stack([0.5 * (ego[0] + past_ego[0]) * dt, 0.5 * (ego[1] + past_ego[1]) * dt])

    def reset_memory(self) -> None:
        self.memory.clear()

    def memory_length(self) -> int:
        return len(self.memory)
