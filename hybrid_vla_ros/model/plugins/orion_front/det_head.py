"""ORION's detection head (`pts_bbox_head.`, OrionHead; MindDrive's MinddriveHead has the same token path), written
from the published layout and inference steps (docs/sources/published_orion_minddrive.md; Orion
`mmcv/models/dense_heads/orion_head.py` forward L774-831): 256 scene queries + 600 detection queries + 300 queries
propagated from the streaming memory through the PETR decoder; QT-Former history queries (memory_decoder_mq reads
the scene-query memory, memory_decoder_cq this frame's scene queries); a can-bus token. Tokens to the LLM:
scene (E) + history (H) + can-bus (1), each through `output_projection` / `can_bus_embed` to the LLM width.

Kept as parameters only (their keys load; they never reach the LLM's tokens): the motion decoder, motion mode
queries, trajectory and traffic-light branches, and every cls/reg branch but the last decoder layer's (one shared
module, as published); the last layer's cls/reg outputs pick and place the queries the memory keeps (memory.py)."""

from __future__ import annotations

import torch
from torch import nn

from .memory import DetMemory
from .petr import PETRTransformer, QTDecoder, nerf_encoding, posemb_1d

# qt_attn_bias: the one-layer decoders' attention bias (published: none, FlashMHA's `bias` gets dropout 0.0);
# traj_num_cls: 1 with the published sigmoid focal loss (loss_traj_cls use_sigmoid=True), 2 with softmax
DET_DEFAULTS = dict(num_classes=9, code_size=10, n_control=11, can_bus_len=2, fut_mode=6, fut_ts=6,
                    pc_range=[-51.2, -51.2, -5.0, 51.2, 51.2, 3.0], qt_attn_bias=True, traj_num_cls=1)


def branch(dim: int, out: int, norm: bool, width: int | None = None) -> nn.Sequential:
    """Two hidden Linear layers (+ LN with norm) + ReLU, then Linear(out): the published cls / reg / tl branches."""
    width = width or dim
    layers: list = []
    for i in range(2):
        layers += [nn.Linear(dim if i == 0 else width, width)] + ([nn.LayerNorm(width)] if norm else []) + [nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, out))


def shared_list(module: nn.Module, count: int) -> nn.ModuleList:
    """One module under `count` indices (published: one branch per decoder layer, the same object)."""
    return nn.ModuleList([module] * count)


def lane_net(dim: int, layers: int = 3) -> nn.Module:
    """MindDrive 0.5B's `lane_encoder` (LaneNet): layer_seq.lmlp_<i>.mlp = Linear, LayerNorm, ReLU."""
    net = nn.Module()
    net.layer_seq = nn.Sequential()
    for i in range(layers):
        mlp = nn.Module()
        mlp.mlp = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim), nn.ReLU())
        net.layer_seq.add_module(f"lmlp_{i}", mlp)
    return net


def frozen(values) -> nn.Parameter:
    return nn.Parameter(torch.tensor(values, dtype=torch.float32), requires_grad=False)


class DetHead(nn.Module):
    def __init__(self, c: dict, shared: dict):
        super().__init__()
        c = {**DET_DEFAULTS, **c}
        self.c = c
        d, layers = c["embed_dims"], c["num_layers"]
        self.transformer = PETRTransformer(layers, d, c["num_heads"], c["ffn_dims"])
        self.code_weights, self.match_costs = frozen([1.0] * c["code_size"]), frozen([1.0] * c["code_size"])
        self.pc_range = frozen(c["pc_range"])
        qt = dict(dim=d, heads=c["num_heads"], ffn=2 * d, bias=c["qt_attn_bias"])
        self.motion_decoder = QTDecoder(**qt)                                         # not computed: boxes' motion
        self.motion_mode_query = nn.Embedding(c["fut_mode"], d)
        self.memory_query = nn.Embedding(c["num_memory"], d)
        self.scene_time_embedding = nn.Sequential(nn.Linear(d, d), nn.LayerNorm(d))
        self.memory_decoder_cq, self.memory_decoder_mq = QTDecoder(**qt), QTDecoder(**qt)
        self.traj_branches = nn.ModuleList([branch(2 * d, c["fut_ts"] * 2, False)])  # not computed
        self.traj_cls_branches = nn.ModuleList([branch(2 * d, c["traj_num_cls"], True)])   # not computed
        self.cls_branches = shared_list(branch(d, c["num_classes"], True), layers)
        self.reg_branches = shared_list(branch(d, c["code_size"], False), layers)
        self.input_projection = nn.Linear(c["in_channels"], d)
        self.output_projection = nn.Linear(d, c["out_dims"])
        self.reference_points = nn.Embedding(c["num_query"], 3)
        self.pseudo_reference_points = nn.Embedding(c["num_propagated"], 3)
        self.query_embedding = nn.Embedding(c["num_extra"], d)
        can_bus_in = 19 * (1 + c["can_bus_len"]) + 16 * (c["memory_len"] // c["topk_proposals"])   # 89 published
        self.can_bus_embed = nn.Sequential(nn.Linear(can_bus_in, 4 * d), nn.ReLU(), nn.Linear(4 * d, c["out_dims"]))
        self.query_pos, self.time_embedding, self.ego_pose_pe = shared["query_pos"], shared["time_embedding"], \
            shared["ego_pose_pe"]                                                       # the detector's, shared
        self.tl_branches = shared_list(branch(d, 4, True), layers)                   # not computed
        self._minddrive_extras(c, qt)
        self.memory = DetMemory(c)

    def _minddrive_extras(self, c: dict, qt: dict) -> None:
        """MindDrive's head (fut_mode 1): with use_pe `pos_mlp_sa`; with motion_map_decoder (its 0.5B) the DREAM
        decoder, `lane_encoder` and `pos_mlp`. Parameters only: they serve the boxes' motion, not the tokens."""
        d = qt["dim"]
        if c.get("use_pe"):
            self.pos_mlp_sa = nn.Linear(2, d)
        if c.get("motion_map_decoder"):
            self.motion_map_decoder = QTDecoder(**qt)
            self.lane_encoder = lane_net(d)
            if c.get("use_pe"):
                self.pos_mlp = nn.Linear(2, d)

    def _queries(self, mem: dict) -> tuple:
        """The decoder's queries: E scene + Q detection + P propagated -> tgt, query_pos (1, E+Q+P, D), their
        reference points (1, Q+P, 3, normalised) and the rest of the memory as extra keys (1, M-P, D) x 2."""
        c, dtype = self.c, self.query_embedding.weight.dtype
        e, p = c["num_extra"], c["num_propagated"]
        ref = torch.cat([torch.zeros_like(self.reference_points.weight[:e]), self.reference_points.weight])[None]
        query_pos = self.query_pos(nerf_encoding(ref.repeat(1, 1, c["n_control"])))     # (1, E+Q, D)
        pc = self.pc_range.to(dtype)
        temp_ref = (mem["reference"] - pc[:3]) / (pc[3:] - pc[:3])                          # (1, M, 3)
        temp_pos = self.query_pos(nerf_encoding(temp_ref.repeat(1, 1, c["n_control"])))
        motion = torch.cat([mem["timestamp"], mem["egopose"][..., :3, :].flatten(-2)], dim=-1)  # (1, M, 13)
        temp_pos = self.ego_pose_pe(temp_pos, nerf_encoding(motion))
        now = posemb_1d(torch.zeros_like(ref[..., :1]), c["embed_dims"]).to(dtype)           # age 0: (1, E+Q, D)
        query_pos = query_pos + self.time_embedding(now)
        temp_pos = temp_pos + self.time_embedding(posemb_1d(mem["timestamp"], c["embed_dims"]).to(dtype))
        tgt = torch.cat([self.query_embedding.weight[None], torch.zeros_like(query_pos[:, e:]),
                         mem["embedding"][:, :p]], dim=1)                                  # (1, E+Q+P, D)
        query_pos = torch.cat([torch.zeros_like(query_pos[:, :e]), query_pos[:, e:], temp_pos[:, :p]], dim=1)
        reference = torch.cat([ref[:, e:], temp_ref[:, :p]], dim=1)                        # (1, Q+P, 3)
        return tgt, query_pos, reference, mem["embedding"][:, p:], temp_pos[:, p:]

    def _mask(self, device) -> torch.Tensor:
        """with_mask (published config): detection and propagated queries do not see the scene queries."""
        c = self.c
        queries = c["num_extra"] + c["num_query"] + c["num_propagated"]
        mask = torch.zeros(queries, c["num_extra"] + c["num_query"] + c["memory_len"], dtype=torch.bool, device=device)
        mask[c["num_extra"]:, : c["num_extra"]] = True
        return mask

    def _history(self, mem: dict, scene: torch.Tensor) -> torch.Tensor:
        """QT-Former: the history queries read the remembered scene queries (with their age), then this frame's
        scene queries (1, E, D) -> (1, H, D)."""
        current = self.memory_query.weight[None]                                             # (1, H, D)
        ages = posemb_1d(mem["scene_timestamp"], current.shape[-1]).to(current.dtype)
        ages = self.scene_time_embedding(ages)                                              # (1, S, D)
        read = self.memory_decoder_mq(current, mem["scene_query"], torch.zeros_like(current), ages)
        return self.memory_decoder_cq(read, scene)

    def forward(self, feats: torch.Tensor, pos_embed: torch.Tensor, frame: dict) -> torch.Tensor:
        """feats (N, C, h, w), pos_embed (1, N h w, D), frame: DetMemory's per-frame inputs -> (1, E+H+1, out)."""
        mem = self.memory.before(frame, self.pseudo_reference_points.weight, self.pc_range)
        memory = self.input_projection(feats.permute(0, 2, 3, 1).reshape(1, -1, feats.shape[1]))   # (1, N h w, D)
        tgt, query_pos, reference, temp_memory, temp_pos = self._queries(mem)
        outs = self.transformer(tgt, memory, query_pos, pos_embed, self._mask(tgt.device), temp_memory, temp_pos)
        outs = torch.nan_to_num(outs)                                                   # (layers, 1, E+Q+P, D)
        e = self.c["num_extra"]
        scene, history = outs[-1, :, :e], self._history(mem, outs[-1, :, :e])
        can_bus = self.memory.can_bus_input(frame).to(scene.dtype)                       # (1, 89)
        tokens = torch.cat([self.output_projection(torch.cat([scene, history], dim=1)),
                            self.can_bus_embed(can_bus)[:, None]], dim=1)               # (1, E+H+1, out)
        last = outs[-1, :, e:]                                                          # (1, Q+P, D)
        self.memory.after(frame, last, self.cls_branches[-1](last), self.reg_branches[-1](last), reference,
                          history, self.pc_range)
        return tokens
