"""Action tokens (OpenVLA-style): each waypoint step's x and y discretised into `action_bins` uniform bins
over [-r, +r] metres, bin b <-> vocabulary id `base + b` (the top of the vocabulary, above the prompt's ids).
A frame's action is 2 * num_waypoints tokens, decoded greedily one at a time (engine/actionflow/packing.py)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ...errors import InputError, expect
from ..spec import VLASpec


class ActionTokenizer:
    def __init__(self, spec: VLASpec):
        self.bins, self.range_m = spec.action_bins, spec.action_step_range_m
        self.base = spec.vocab_size - spec.action_bins          # ids [base, vocab_size) are action tokens
        self.tokens_per_frame = 2 * spec.num_waypoints         # x, y of each step
        self.dt_s = spec.waypoint_dt_s

    def encode(self, steps: np.ndarray) -> list[int]:
        """(N, 2) metres per step -> 2N token ids (values outside the range clip to its ends)."""
        steps = np.asarray(steps, dtype=np.float64)
        expect(steps.shape == (self.tokens_per_frame // 2, 2), InputError,
               f"action steps of shape {steps.shape}, expected {(self.tokens_per_frame // 2, 2)}")
        unit = (np.clip(steps, -self.range_m, self.range_m) + self.range_m) / (2 * self.range_m)
        return [self.base + int(b) for b in np.rint(unit * (self.bins - 1)).astype(np.int64).reshape(-1)]

    def decode(self, ids: list[int]) -> np.ndarray:
        """2N token ids -> (N, 2) metres per step (bin centres)."""
        bins = np.asarray(ids, dtype=np.int64) - self.base
        expect(len(ids) == self.tokens_per_frame and bool(((bins >= 0) & (bins < self.bins)).all()), InputError,
               f"{len(ids)} action tokens {list(ids)[:4]}..., expected {self.tokens_per_frame} ids in "
               f"[{self.base}, {self.base + self.bins})")
        return (bins.astype(np.float64) / (self.bins - 1) * 2 - 1).reshape(-1, 2) * self.range_m

    def waypoints(self, ids: list[int]) -> np.ndarray:
        """2N token ids -> (N, 5) x, y (cumulated steps), heading, speed, time_from_start: the Trajectory's
        points, as the waypoint head gives them."""
        steps = self.decode(ids)
        xy = steps.cumsum(axis=0)
        heading = np.arctan2(steps[:, 1], steps[:, 0])
        speed = np.hypot(steps[:, 0], steps[:, 1]) / self.dt_s
        t = np.arange(1, len(steps) + 1) * self.dt_s
        return np.column_stack([xy, heading, speed, t])


class TokenHead(nn.Module):
    """Final hidden state -> logits over the action bins only (greedy decoding picks among action tokens;
    the equivalent of a full LM head restricted to the reserved ids)."""

    def __init__(self, hidden_size: int, bins: int):
        super().__init__()
        self.proj = nn.Linear(hidden_size, bins)
        nn.init.normal_(self.proj.weight, std=1.0 / math.sqrt(hidden_size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden)                          # (..., bins)
