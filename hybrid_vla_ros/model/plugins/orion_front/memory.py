"""The two heads' streaming memories, as the published heads keep them (docs/sources/published_orion_minddrive.md;
Orion `orion_head.py` pre_update_memory / post_update_memory / temporal_alignment L459-548, `orion_head_map.py`
L278-335). State is float32 on the features' device; `frame` holds the frame's inputs (encoder.py):

    t          seconds since the memory's first frame (float; only differences matter, as with the published
               absolute `timestamp`)
    ego_pose   (4, 4) map_from_base; ego_pose_inv its inverse (the published `ego_pose` / `ego_pose_inv`)
    can_bus    (18,) and command (float), see encoder.py

Before a frame the remembered entries are moved into the current ego frame and aged; a gap of 2 s or more (the
published test; there is no scene token here) forgets them. After it the top-k queries by class score are
remembered with their reference points (the last decoder layer's reg branch), in the map frame. The published
`memory_velo` is refreshed and stored but never read in inference: not kept here."""

from __future__ import annotations

import torch

from .petr import inverse_sigmoid


def transform_points(points: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """(1, M, ..., 3) points by a (4, 4) transform."""
    return points @ matrix[:3, :3].T + matrix[:3, 3]


def top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    """scores (1, L, classes) logits -> (k,) indices of the k highest max-class sigmoid scores."""
    return torch.topk(scores[0].sigmoid().max(dim=-1).values, k).indices


class Memory:
    def __init__(self, c: dict):
        self.c, self.state = c, None

    def reset(self) -> None:
        self.state = None

    def __len__(self) -> int:
        return 0 if self.state is None else int(self.state["frames"])

    def _age(self, frame: dict, s: dict) -> float:
        """Shared part of the move into this frame -> keep (1.0, or 0.0 when the gap is >= 2 s)."""
        dt = frame["t"] - s["t"]
        keep = float(abs(dt) < 2.0)
        s["timestamp"] = (s["timestamp"] + dt)[:, : self.c["memory_len"]] * keep
        s["egopose"] = (frame["ego_pose_inv"] @ s["egopose"])[:, : self.c["memory_len"]] * keep
        s["reference"] = transform_points(s["reference"], frame["ego_pose_inv"])[:, : self.c["memory_len"]] * keep
        s["embedding"] = s["embedding"][:, : self.c["memory_len"]] * keep
        s["frames"] = int(s["frames"] * keep)
        return keep

    def _remember(self, frame: dict, s: dict, queries, reference, index) -> None:
        """Prepend the chosen queries (1, k, D) with their reference points (metres), in the map frame."""
        k = len(index)
        s["embedding"] = torch.cat([queries[:, index].detach(), s["embedding"]], dim=1)
        s["timestamp"] = torch.cat([s["timestamp"].new_zeros(1, k, 1), s["timestamp"]], dim=1)
        eye = torch.eye(4, device=queries.device).expand(1, k, 4, 4)
        s["egopose"] = frame["ego_pose"] @ torch.cat([eye, s["egopose"]], dim=1)
        s["reference"] = transform_points(torch.cat([reference[:, index].detach().float(), s["reference"]], dim=1),
                                          frame["ego_pose"])
        s["t"], s["frames"] = frame["t"], s["frames"] + 1


class DetMemory(Memory):
    """The detection head's: propagated queries (embedding, reference, timestamp, egopose), the QT-Former's scene
    queries and their ages, and the can-bus rows of the last frames."""

    def _empty(self, device) -> dict:
        c = self.c
        m = c["memory_len"]
        return {"embedding": torch.zeros(1, m, c["embed_dims"], device=device), "t": 0.0, "frames": 0,
                "reference": torch.zeros(1, m, 3, device=device), "timestamp": torch.zeros(1, m, 1, device=device),
                "egopose": torch.zeros(1, m, 4, 4, device=device),
                "canbus": torch.zeros(1, c["can_bus_len"], 19, device=device), "canbus_rows": 0,
                "scene_query": torch.zeros(1, c["scene_memory_len"], c["embed_dims"], device=device),
                "scene_timestamp": torch.zeros(1, c["scene_memory_len"], 1, device=device)}

    def before(self, frame: dict, pseudo: torch.Tensor, pc_range: torch.Tensor) -> dict:
        """-> this frame's view of the memory, in the parameters' dtype."""
        device, p = pseudo.device, self.c["num_propagated"]
        if self.state is None:
            self.state, keep = self._empty(device), 0.0
        else:
            s = self.state
            keep = self._age(frame, s)
            rows = s["canbus_rows"]
            s["canbus"][:, :rows, 1:4] -= frame["can_bus"][:3]
            s["canbus"][:, :rows, -1] -= frame["can_bus"][-1]
            s["canbus"], s["canbus_rows"] = s["canbus"][:, : self.c["can_bus_len"]] * keep, int(rows * keep)
            s["scene_timestamp"] = (s["scene_timestamp"] + frame["t"] - s["t"])[:, : self.c["scene_memory_len"]] * keep
            s["scene_query"] = s["scene_query"][:, : self.c["scene_memory_len"]] * keep
        s = self.state
        pc = pc_range.float()
        s["reference"][:, :p] += (1 - keep) * (pseudo.float() * (pc[3:] - pc[:3]) + pc[:3])   # the first frame's
        s["egopose"][:, :p] += (1 - keep) * torch.eye(4, device=device)
        dtype = pseudo.dtype
        return {k: v.to(dtype) if torch.is_tensor(v) else v for k, v in s.items()}

    def can_bus_input(self, frame: dict) -> torch.Tensor:
        """(1, 19 + 19 x rows + 16 x chunks): [command, can_bus without translation and yaw in degrees], the
        remembered rows, the mean egopose of each chunk of top-k memory entries (published L818-829)."""
        s, k = self.state, self.c["topk_proposals"]
        chunks = s["egopose"].reshape(1, -1, k, 16).mean(dim=-2).flatten(-2)             # (1, 16 M / k)
        return torch.cat([self._row(frame)[None], s["canbus"].flatten(-2), chunks], dim=-1)

    @staticmethod
    def _row(frame: dict) -> torch.Tensor:
        """(19,) [command, can_bus] with the translation and the yaw in degrees zeroed (rec_can_bus)."""
        row = torch.cat([frame["command"].view(1), frame["can_bus"]])
        row[1:4], row[-1] = 0.0, 0.0
        return row

    def after(self, frame, queries, cls, reg, reference, history, pc_range) -> None:
        """queries (1, Q+P, D), cls / reg: the last layer's branch outputs, reference (1, Q+P, 3) normalised."""
        s, pc = self.state, pc_range.float()
        centres = torch.sigmoid(reg[..., :3].float() + inverse_sigmoid(reference.float()))
        centres = centres * (pc[3:] - pc[:3]) + pc[:3]                                   # (1, Q+P, 3) metres
        self._remember(frame, s, queries.float(), centres, top_k(cls.float(), self.c["topk_proposals"]))
        s["canbus"] = torch.cat([self._row(frame).view(1, 1, 19), s["canbus"]], dim=1)
        s["canbus_rows"] += 1
        s["canbus"][:, : s["canbus_rows"], 1:4] += frame["can_bus"][:3]
        s["canbus"][:, : s["canbus_rows"], -1] += frame["can_bus"][-1]
        s["scene_query"] = torch.cat([history.detach().float(), s["scene_query"]], dim=1)
        s["scene_timestamp"] = torch.cat([s["scene_timestamp"].new_zeros(1, history.shape[1], 1),
                                          s["scene_timestamp"]], dim=1)


class MapMemory(Memory):
    """The map head's: remembered lane queries with their n_control points; nothing propagated into the queries."""

    def before(self, frame: dict, like: torch.Tensor) -> dict:
        c = self.c
        if self.state is None:
            m = c["memory_len"]
            self.state = {"embedding": torch.zeros(1, m, c["embed_dims"], device=like.device), "t": 0.0, "frames": 0,
                          "reference": torch.zeros(1, m, c["n_control"], 3, device=like.device),
                          "timestamp": torch.zeros(1, m, 1, device=like.device),
                          "egopose": torch.zeros(1, m, 4, 4, device=like.device)}
        else:
            self._age(frame, self.state)
        return {k: v.to(like.dtype) if torch.is_tensor(v) else v for k, v in self.state.items()}

    def after(self, frame, lanes, cls, points) -> None:
        """lanes (1, L1, D) one-to-one lane queries, cls their logits, points (1, L1, n, 3) metres."""
        self._remember(frame, self.state, lanes.float(), points, top_k(cls.float(), self.c["topk_proposals"]))
