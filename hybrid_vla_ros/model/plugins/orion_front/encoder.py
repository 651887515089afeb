"""`orion_front`: ORION's (and MindDrive's) perception front end as a scene encoder, under the published module
tree and state-dict keys (docs/sources/published_orion_minddrive.md, docs/CHECKPOINTS.md "ORION's front end"):

    img_backbone.            EVA-02 ViT (eva_vit.py)
    query_pos, time_embedding, ego_pose_pe   shared with pts_bbox_head. and map_head. (three copies of each key)
    pts_bbox_head.           detection head: scene + history + can-bus tokens (det_head.py)
    map_head.                map head: scene tokens (map_head.py)
    position_range, coords_d, position_encoder   PETR's 3D position embedding of every image token

One frame (Orion `simple_test_pts`): backbone -> 3D position embedding from lidar2img -> detection head ->
map head -> [obj (E + H + 1), map (E_map)] tokens at the LLM width. Both heads keep their streaming memory
(memory.py) across frames, in frame order; `reset_memory` empties it (the published first-frame state).

The frame's inputs from the frame context (context.py; base_link is the published "lidar" / ego frame):
    lidar2img     each camera's, scaled to the encoder's input size; an unknown camera's tokens get no position
                  embedding (zero: the published code always has geometry)
    timestamp     the frame's stamp (s, from the first frame after a reset)
    ego_pose      map_from_base (identity when unknown); ego_pose_inv its inverse
    can_bus (18)  translation = ego_pose's; quaternion (w, x, y, z) of the yaw about z (pyquaternion's order, as
                  B2D builds it); velocity (speed, 0, 0), acceleration (accel, 0, 0), rotation rate
                  (0, 0, yaw rate) from ego_status, in base_link (B2D's frame for these: not checked); yaw in rad
                  in [0, 2 pi) and in degrees (ego_pose's heading)
    command       the route command's index in ORION's order (CARLA RoadOption - 1: turn left, turn right, go
                  straight, follow lane, change lane left, change lane right); none / another: follow lane
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ....errors import ConfigError, expect
from ....types import NAV_COMMANDS
from ..scene_encoders import SceneEncoder
from .det_head import DetHead
from .eva_vit import EVAViT
from .map_head import MapHead
from .petr import MLN, inverse_sigmoid

ORION_COMMANDS = ("turn left", "turn right", "go straight", "follow lane", "change lane left", "change lane right")
POSITION_RANGE = [-61.2, -61.2, -10.0, 61.2, 61.2, 10.0]
# ORION's released front end (orion_stage3.py; MindDrive's the same, its det {fut_mode: 1, use_pe: true} and, for
# its 0.5B, motion_map_decoder: true): 6 cameras of 640 x 640, EVA-02-L, 256-wide PETR heads -> 529 tokens; the
# one-layer decoders' attention without bias (FlashMHA given dropout 0.0 as its bias flag), one sigmoid traj class.
RELEASED = dict(image_height=640, image_width=640, cameras=6, embed_dims=256, num_heads=8, ffn_dims=2048, num_layers=6,
                depth_num=64, backbone=dict(embed_dim=1024, depth=24, num_heads=16, patch_size=16, window_size=16,
                                            window_blocks=[i for i in range(23) if i % 3 != 2], pretrain_img_size=224),
                det=dict(num_query=600, num_propagated=300, memory_len=600, topk_proposals=300, num_extra=256,
                         num_memory=16, scene_memory_len=256, qt_attn_bias=False, traj_num_cls=1),
                map=dict(num_lane=1800, num_lanes_one2one=300, num_extra=256, memory_len=600, topk_proposals=300))
PART_KEYS = {"backbone": ("embed_dim", "depth", "num_heads", "patch_size", "window_size", "pretrain_img_size"),
             "det": ("num_query", "num_propagated", "memory_len", "topk_proposals", "num_extra", "num_memory",
                     "scene_memory_len"),
             "map": ("num_lane", "num_lanes_one2one", "num_extra", "memory_len", "topk_proposals")}
NEEDED = ("image_height", "image_width", "cameras", "backbone", "embed_dims", "num_heads", "ffn_dims", "num_layers",
          "depth_num", "det", "map")


def lid_depths(count: int, start: float, far: float) -> torch.Tensor:
    """PETR's linearly increasing depth bins: start + (far - start) i (i + 1) / (count (count + 1))."""
    i = torch.arange(count, dtype=torch.float32)
    return start + (far - start) / (count * (1 + count)) * i * (i + 1)


def check_sizes(config: dict) -> None:
    """The sizes the front end's layers need of each other (ConfigError naming the rule), before any is built."""
    det, map_, patch = config["det"], config["map"], config["backbone"]["patch_size"]
    where = "scene encoder 'orion_front'"
    expect(config["image_height"] == config["image_width"], ConfigError, f"{where}: square images (the published 640 x 640)")
    expect(config["image_width"] % patch == 0, ConfigError,
           f"{where}: image side {config['image_width']} is not a multiple of the backbone's patch_size {patch}")
    expect(det["memory_len"] % det["topk_proposals"] == 0 and det["num_propagated"] <= det["memory_len"],
           ConfigError, f"{where}: det memory_len a multiple of topk_proposals, num_propagated <= memory_len")
    expect(det["topk_proposals"] <= det["num_query"] + det["num_propagated"], ConfigError,
           f"{where}: det topk_proposals {det['topk_proposals']} > num_query + num_propagated "
           f"{det['num_query'] + det['num_propagated']}: the memory keeps the top-k of those queries")
    expect(map_["topk_proposals"] <= map_["num_lanes_one2one"], ConfigError,
           f"{where}: map topk_proposals {map_['topk_proposals']} > num_lanes_one2one {map_['num_lanes_one2one']}: "
           f"the memory keeps the top-k of the one-to-one lanes")
    expect(isinstance(det.get("qt_attn_bias", True), bool) and det.get("traj_num_cls", 1) in (1, 2), ConfigError,
           f"{where}: det qt_attn_bias must be true or false, traj_num_cls 1 (sigmoid) or 2 (softmax)")


class OrionFrontEnd(SceneEncoder):
    side_inputs = ("lidar2img", "cameras_known", "ego_pose", "ego_status", "command")

    def __init__(self, config: dict, hidden_size: int):
        super().__init__(config)
        c = config
        d = c["embed_dims"]
        self.num_tokens = self.tokens_for(c)
        self.img_backbone = EVAViT({**c["backbone"], "img_size": c["image_width"]})
        self.query_pos = nn.Sequential(nn.Linear(33 * 12, d), nn.ReLU(), nn.Linear(d, d))   # 11 points x 3 x NeRF
        self.time_embedding = nn.Sequential(nn.Linear(d, d), nn.LayerNorm(d))
        self.ego_pose_pe = MLN(13 * 12, d)                                                  # (dt, 3x4 pose) x NeRF
        shared = {"query_pos": self.query_pos, "time_embedding": self.time_embedding, "ego_pose_pe": self.ego_pose_pe}
        common = {k: c[k] for k in ("embed_dims", "num_heads", "ffn_dims", "num_layers")}
        common.update(in_channels=c["backbone"]["embed_dim"], out_dims=hidden_size)
        self.pts_bbox_head = DetHead({**common, **c["det"]}, shared)
        self.map_head = MapHead({**common, **c["map"]}, shared)
        position_range = c.get("position_range", POSITION_RANGE)
        self.position_range = nn.Parameter(torch.tensor(position_range), requires_grad=False)
        self.coords_d = nn.Parameter(lid_depths(c["depth_num"], c.get("depth_start", 1.0), position_range[3]),
                                     requires_grad=False)
        self.position_encoder = nn.Sequential(nn.Linear(3 * c["depth_num"], 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.origin_ns: int | None = None

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "OrionFrontEnd":
        missing = [k for k in NEEDED if k not in config]
        missing += [f"{part}.{k}" for part, keys in PART_KEYS.items() if isinstance(config.get(part), dict)
                    for k in keys if not isinstance(config[part].get(k), int) or config[part][k] < 1]
        expect(not missing, ConfigError, f"scene encoder 'orion_front': config lacks {missing} (positive integers; "
                                         f"config {config})")
        check_sizes(config)
        if spec is not None:
            expect((spec.image_height, spec.image_width, spec.num_cameras) ==
                   (config["image_height"], config["image_width"], config["cameras"]), ConfigError,
                   f"scene encoder 'orion_front': images {config['image_height']}x{config['image_width']} x "
                   f"{config['cameras']} cameras, the spec has {spec.image_height}x{spec.image_width} x "
                   f"{spec.num_cameras}")
            patch = config["backbone"]["patch_size"]
            expect(spec.patch_size == patch, ConfigError,
                   f"scene encoder 'orion_front': its backbone's patch_size is {patch}, the spec's {spec.patch_size}: "
                   f"set patch_size: {patch} in the action head's metadata (a mapping's action_head)")
        return cls(config, hidden_size)

    @classmethod
    def tokens_for(cls, config: dict) -> int:
        det, map_ = config.get("det", {}), config.get("map", {})
        return int(det.get("num_extra", 0)) + int(det.get("num_memory", 0)) + 1 + int(map_.get("num_extra", 0))

    def forward(self, images: torch.Tensor, ego: torch.Tensor, stamp_ns: int, lidar2img=None, cameras_known=None,
                ego_pose=None, ego_status=None, command=None) -> torch.Tensor:
        feats = self.img_backbone(images)                                               # (N, C, h, w)
        pos_embed = self.position_embedding(lidar2img, cameras_known, feats.shape[-2:]).to(feats.dtype)  # (1, N h w, D)
        frame = self.frame_inputs(stamp_ns, ego_pose, ego_status, command, feats.device)
        obj = self.pts_bbox_head(feats, pos_embed, frame)                               # (1, E + H + 1, hidden)
        lanes = self.map_head(feats, pos_embed, frame)                                  # (1, E_map, hidden)
        return torch.cat([obj, lanes], dim=1)[0]                                        # (tokens, hidden)

    def position_embedding(self, lidar2img: torch.Tensor, known: torch.Tensor, hw) -> torch.Tensor:
        """lidar2img (N, 4, 4) -> (1, N h w, D): every token's ray at the depth bins, taken into base_link by
        lidar2img's inverse, normalised to position_range, inverse-sigmoid, through position_encoder."""
        h, w = hw
        stride = self.config["image_width"] // w
        dev = self.coords_d.device
        v, u = torch.meshgrid(torch.arange(h, device=dev) * stride + stride // 2,
                              torch.arange(w, device=dev) * stride + stride // 2, indexing="ij")
        depth = self.coords_d.float().view(1, -1, 1)                                    # (1, D, 1)
        uv = torch.stack([u.flatten(), v.flatten()], dim=-1).float()[:, None]           # (h w, 1, 2)
        coords = torch.cat([uv * depth.clamp(min=1e-5), depth.expand(uv.shape[0], -1, 1),
                            torch.ones(uv.shape[0], depth.shape[1], 1, device=dev)], dim=-1)   # (h w, D, 4)
        img2lidar = torch.linalg.inv(lidar2img.float().to(dev))                         # (N, 4, 4)
        points = torch.einsum("nij,pdj->npdi", img2lidar, coords)[..., :3]              # (N, h w, D, 3)
        r = self.position_range.float()
        points = (points - r[:3]) / (r[3:] - r[:3])
        weight = self.position_encoder[0].weight
        encoded = self.position_encoder(inverse_sigmoid(points.flatten(2)).to(weight.dtype))   # (N, h w, D)
        return (encoded * known.view(-1, 1, 1).to(encoded)).reshape(1, -1, encoded.shape[-1])

    def frame_inputs(self, stamp_ns: int, ego_pose, ego_status, command, device) -> dict:
        """The heads' per-frame inputs (module docstring), float32 on `device`."""
        if self.origin_ns is None:
            self.origin_ns = stamp_ns
        pose = ego_pose.double().cpu()
        yaw = math.atan2(float(pose[1, 0]), float(pose[0, 0]))
        yaw = yaw + 2 * math.pi if yaw < 0 else yaw
        speed, accel, yaw_rate = (float(ego_status[i]) for i in (0, 1, 2))
        can_bus = [*pose[:3, 3].tolist(), math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2), speed, 0.0, 0.0,
                   accel, 0.0, 0.0, 0.0, 0.0, yaw_rate, yaw, math.degrees(yaw)]
        nav = NAV_COMMANDS[int(command.argmax())] if float(command.max()) > 0 else "follow lane"
        index = ORION_COMMANDS.index(nav) if nav in ORION_COMMANDS else ORION_COMMANDS.index("follow lane")
        f32 = dict(dtype=torch.float32, device=device)
        return {"t": (stamp_ns - self.origin_ns) * 1e-9, "ego_pose": pose.to(**f32),
                "ego_pose_inv": torch.linalg.inv(pose).to(**f32), "can_bus": torch.tensor(can_bus, **f32),
                "command": torch.tensor(float(index), **f32)}

    def reset_memory(self) -> None:
        self.pts_bbox_head.memory.reset()
        self.map_head.memory.reset()
        self.origin_ns = None

    def memory_length(self) -> int:
        return len(self.pts_bbox_head.memory)
