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
    side_inputs                              (optional) frame context tensors forward also reads, as keyword
                                                arguments, float32 (head_inputs.py's context names, e.g.
                                                lidar2img (N, 4, 4), intrinsics scaled to the encoder's input
                                                size; a camera without geometry: unknown)
    forward(images (N, 3, H, W), ego (2,), stamp_ns, **side) -> (tokens_for(config), hidden_size)
    reset_memory(), memory_length()          its cross-frame state (none: the defaults)
`encode()` (not to override) runs forward in frame order: a stamp going back (a bag loop, /clock reset)
resets the memory first; every reset is counted with its reason.

`QueryScene` is the reference to copy: learnable scene queries cross-attending to a small ViT's patch features
of every camera, plus history queries attending to a FIFO of past frames' scene queries, each keyed by the
ego motion since (the ORION / MindDrive shape at toy size). With `geometry: true` each patch also gets a 3D
position encoding from its camera's `lidar2img` (PETR's, which ORION's and MindDrive's front ends use): the
patch centre's ray at `depth_bins` depths up to `depth_max_m`, taken back into base_link, through an MLP.
"""

from __future__ import annotations

from collections import deque

import torch
from torch import nn
from torch.nn import functional as F

from ...errors import ConfigError, expect


class SceneEncoder(nn.Module):
    plugin_name = ""
    num_tokens = 0
    side_inputs: tuple[str, ...] = ()   # context.CONTEXT_TENSORS names; none: forward(images, ego, stamp_ns)

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

    def encode(self, images: torch.Tensor, ego: torch.Tensor, stamp_ns: int, context=None) -> torch.Tensor:
        """One frame, in order: a stamp before the last one (time went back) resets the memory first. The side
        inputs it declares come from `context` (a context.FrameContext; None: every value unknown)."""
        pending, self._pending_reset = self._pending_reset, None
        if pending is not None:
            self.reset(pending, stamp_ns)
        elif self.last_stamp_ns is not None and stamp_ns < self.last_stamp_ns:
            self.reset("time_jump", stamp_ns)
        tokens = self.forward(images, ego, stamp_ns, **self._side(context, images))
        self.last_stamp_ns = stamp_ns
        return tokens


    def _side(self, context, images: torch.Tensor) -> dict:
        if not self.side_inputs:
            return {}
        from ...context import FrameContext
        size = (images.shape[-1], images.shape[-2])                                    # the encoder's input W, H
        tensors = (context if context is not None else FrameContext()).as_tensors(size, images.shape[0])
        return {name: tensors[name].to(images.device) for name in self.side_inputs}   # float32: geometry at full precision


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
GEOMETRY_DEFAULTS = {"depth_bins": 4, "depth_max_m": 60.0}   # with geometry: true


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
        if c.get("geometry"):
            self.side_inputs = ("lidar2img", "cameras_known")
            bins = int(c.get("depth_bins", GEOMETRY_DEFAULTS["depth_bins"]))
            self.geometry = nn.Sequential(nn.Linear(3 * bins, width), nn.ReLU(), nn.Linear(width, width))

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "QueryScene":
        missing = [k for k in QUERY_SCENE_KEYS if not isinstance(config.get(k), int) or config[k] < 1]
        expect(not missing, ConfigError, f"scene encoder 'query_scene': {missing} must be positive integers "
                                         f"(config {config})")
        expect(config["width"] % config["heads"] == 0, ConfigError,
               f"scene encoder 'query_scene': width {config['width']} not divisible by heads {config['heads']}")
        bins, far = config.get("depth_bins", 4), config.get("depth_max_m", 60.0)
        expect(isinstance(config.get("geometry", False), bool) and isinstance(bins, int) and bins >= 1 and
               isinstance(far, (int, float)) and far > 1.0, ConfigError,
               f"scene encoder 'query_scene': geometry (true/false), depth_bins (>= 1) and depth_max_m (> 1 m) "
               f"(config {config})")
        return cls(config, hidden_size)

    @classmethod
    def tokens_for(cls, config: dict) -> int:
        return int(config.get("scene_queries", 0)) + int(config.get("history_queries", 0))

    def forward(self, images: torch.Tensor, ego: torch.Tensor, stamp_ns: int, lidar2img=None,
                cameras_known=None) -> torch.Tensor:
        patches = self.patch(images).flatten(2).transpose(1, 2)                        # (N, P, D)
        patches = patches + self.position + self.camera[: images.shape[0]]
        if lidar2img is not None:
            patches = patches + self._geometry(lidar2img, cameras_known).to(patches.dtype)
        x = patches.reshape(-1, patches.shape[-1])                                     # (N P, D) all cameras
        for block in self.vit:
            x = block(x)
        scene = self.scene(self.scene_queries + self.ego(ego), x)                      # (Q, D)
        keys = [scene] + [past + self.motion(self._motion(ego, past_ego, stamp_ns - past_stamp))
                          for past, past_ego, past_stamp in self.memory]
        history = self.history(self.history_queries, torch.cat(keys))                  # (Hq, D)
        self.memory.append((scene.detach().clone(), ego.clone(), stamp_ns))
        return self.out(torch.cat([scene, history]))                                   # (Q + Hq, hidden)

    def patch_points(self, lidar2img: torch.Tensor) -> torch.Tensor:
        """lidar2img (N, 4, 4) -> (N, P, B, 3): each patch centre's ray at the B depth bins, in base_link (m)."""
        c = self.config
        step, far = c["patch_size"], float(c.get("depth_max_m", GEOMETRY_DEFAULTS["depth_max_m"]))
        bins = int(c.get("depth_bins", GEOMETRY_DEFAULTS["depth_bins"]))
        rows = torch.arange(c["image_height"] // step, dtype=torch.float32) * step + step / 2
        cols = torch.arange(c["image_width"] // step, dtype=torch.float32) * step + step / 2
        v, u = torch.meshgrid(rows, cols, indexing="ij")
        depth = torch.linspace(1.0, far, bins).view(1, bins, 1)                          # (1, B, 1)
        uv = torch.stack([u.flatten(), v.flatten()], dim=-1).unsqueeze(1)                # (P, 1, 2)
        points = torch.cat([uv * depth, depth.expand(uv.shape[0], bins, 1),
                            torch.ones(uv.shape[0], bins, 1)], dim=-1)                   # (P, B, 4) [u d, v d, d, 1]
        return torch.einsum("nij,pbj->npbi", torch.linalg.inv(lidar2img.float().cpu()), points)[..., :3]

    def _geometry(self, lidar2img: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
        """lidar2img (N, 4, 4), known (N,) -> each patch's 3D position encoding (N, P, D); 0 for a camera whose
        geometry is unknown."""
        far = float(self.config.get("depth_max_m", GEOMETRY_DEFAULTS["depth_max_m"]))
        weight = self.geometry[0].weight
        base = self.patch_points(lidar2img) / far                                       # (N, P, B, 3), ~[-1, 1]
        encoding = self.geometry(base.flatten(2).to(weight.device, weight.dtype))         # (N, P, D)
        return encoding * known.view(-1, 1, 1).to(encoding)

    @staticmethod
    def _motion(ego: torch.Tensor, past_ego: torch.Tensor, dt_ns: int) -> torch.Tensor:
        dt = dt_ns * 1e-9
        return torch.stack([0.5 * (ego[0] + past_ego[0]) * dt, 0.5 * (ego[1] + past_ego[1]) * dt])

    def reset_memory(self) -> None:
        self.memory.clear()

    def memory_length(self) -> int:
        return len(self.memory)
