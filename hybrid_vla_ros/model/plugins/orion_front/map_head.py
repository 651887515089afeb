"""ORION's map head (`map_head.`, OrionHeadM; MindDrive's MinddriveHeadM has the same token path), from the
published layout and inference steps (docs/sources/published_orion_minddrive.md; Orion `orion_head_map.py`
L217-257, forward L384-483): 256 scene queries + 1800 lane queries (300 one-to-one, 1500 one-to-many; each lane
11 control points from `reference_points_lane`) through the PETR decoder, the remembered lanes as extra keys.
Tokens to the LLM: the scene queries' outputs through `output_projection` (E, out).

Kept as parameters only: every cls/reg branch but the last decoder layer's (one shared module), whose outputs
for the one-to-one lanes pick the lanes the memory keeps (memory.py); the one-to-many lanes' outputs are unused."""

from __future__ import annotations

import torch
from torch import nn

from .det_head import branch, frozen, shared_list
from .memory import MapMemory
from .petr import PETRTransformer, inverse_sigmoid, nerf_encoding, posemb_1d

MAP_DEFAULTS = dict(num_classes=6, n_control=11, pc_range=[-51.2, -51.2, -5.0, 51.2, 51.2, 3.0])


class MapHead(nn.Module):
    def __init__(self, c: dict, shared: dict):
        super().__init__()
        c = {**MAP_DEFAULTS, **c}
        self.c = c
        d, layers, n = c["embed_dims"], c["num_layers"], c["n_control"]
        self.transformer = PETRTransformer(layers, d, c["num_heads"], c["ffn_dims"])
        self.code_weights, self.match_costs = frozen([1.0, 1.0]), frozen([1.0, 1.0])
        self.pc_range = frozen(c["pc_range"])
        self.cls_branches = shared_list(branch(d, c["num_classes"], True), layers)
        self.reg_branches = shared_list(branch(d, n * 3, False), layers)
        self.input_projection = nn.Linear(c["in_channels"], d)
        self.output_projection = nn.Linear(d, c["out_dims"])
        self.reference_points_lane = nn.Linear(d, 3)
        self.points_embedding_lane = nn.Embedding(n, d)
        self.instance_embedding_lane = nn.Embedding(c["num_lane"], d)
        self.query_embedding = nn.Embedding(c["num_extra"], d)
        self.query_pos, self.time_embedding, self.ego_pose_pe = shared["query_pos"], shared["time_embedding"], \
            shared["ego_pose_pe"]                                                       # the detector's, shared
        self.memory = MapMemory(c)

    def _mask(self, device) -> torch.Tensor:
        """Scene + one-to-one lanes and one-to-many lanes do not see each other; with_mask: lanes do not see the
        scene queries; the remembered lanes are seen by all."""
        c = self.c
        e, one, queries = c["num_extra"], c["num_extra"] + c["num_lanes_one2one"], c["num_extra"] + c["num_lane"]
        mask = torch.zeros(queries, queries + c["memory_len"], dtype=torch.bool, device=device)
        mask[one:, :one] = True
        mask[:one, one:queries] = True
        mask[e:, :e] = True
        return mask

    def _queries(self, mem: dict) -> tuple:
        """-> tgt, query_pos (1, E+L, D), lane reference points (1, L, n 3), remembered keys (1, M, D) x 2."""
        c, dtype = self.c, self.query_embedding.weight.dtype
        lanes = self.instance_embedding_lane.weight[:, None] + self.points_embedding_lane.weight[None]   # (L, n, D)
        reference = self.reference_points_lane(lanes).sigmoid().flatten(-2)[None]            # (1, L, n 3)
        query_pos = self.query_pos(nerf_encoding(reference))                                 # (1, L, D)
        pc = self.pc_range.to(dtype)
        temp_ref = (mem["reference"] - pc[:3]) / (pc[3:] - pc[:3])                            # (1, M, n, 3)
        temp_pos = self.query_pos(nerf_encoding(temp_ref.flatten(-2)))
        motion = torch.cat([mem["timestamp"], mem["egopose"][..., :3, :].flatten(-2)], dim=-1)   # (1, M, 13)
        temp_pos = self.ego_pose_pe(temp_pos, nerf_encoding(motion))
        now = posemb_1d(torch.zeros_like(query_pos[..., :1]), c["embed_dims"]).to(dtype)     # age 0: (1, L, D)
        query_pos = query_pos + self.time_embedding(now)
        temp_pos = temp_pos + self.time_embedding(posemb_1d(mem["timestamp"], c["embed_dims"]).to(dtype))
        scene = self.query_embedding.weight[None]                                             # (1, E, D)
        tgt = torch.cat([scene, self.instance_embedding_lane.weight[None]], dim=1)
        return tgt, torch.cat([torch.zeros_like(scene), query_pos], dim=1), reference, mem["embedding"], temp_pos

    def forward(self, feats: torch.Tensor, pos_embed: torch.Tensor, frame: dict) -> torch.Tensor:
        """feats (N, C, h, w), pos_embed (1, N h w, D) -> (1, E, out)."""
        c = self.c
        mem = self.memory.before(frame, self.query_embedding.weight)
        memory = self.input_projection(feats.permute(0, 2, 3, 1).reshape(1, -1, feats.shape[1]))   # (1, N h w, D)
        tgt, query_pos, reference, temp_memory, temp_pos = self._queries(mem)
        outs = self.transformer(tgt, memory, query_pos, pos_embed, self._mask(tgt.device), temp_memory, temp_pos)
        e, one = c["num_extra"], c["num_lanes_one2one"]
        scene = outs[-1, :, :e]                                                         # (1, E, D)
        lanes = torch.nan_to_num(outs[-1, :, e:e + one])                                # (1, L1, D) one-to-one
        points = torch.sigmoid(self.reg_branches[-1](lanes).float() + inverse_sigmoid(reference[:, :one].float()))
        pc = self.pc_range.float()
        points = points.view(1, one, c["n_control"], 3) * (pc[3:] - pc[:3]) + pc[:3]    # (1, L1, n, 3) metres
        self.memory.after(frame, lanes, self.cls_branches[-1](lanes), points)
        return self.output_projection(scene)
