"""Waypoint heads: the final hidden states at the prompt's query tokens -> N waypoints (dx, dy, heading, speed).
The suffix keeps only the query tokens' rows after the last block.

The interface a plugin implements (subclass WaypointHead):
    from_config(config, hidden_size, spec)  -> an instance; `config` = head_config(spec) below: num_waypoints,
                                            head_hidden, query_tokens (of every pass) and the spec's head_config
                                            (saved in the head file's `hybrid_vla` JSON); spec: the VLASpec
    query_tokens                            how many query tokens it reads (the prompt's last ones, of every
                                            pass of a several-pass model, in pass order)
    side_inputs                             (optional) what else forward reads, as keyword arguments: the
                                            whole final sequence or its mean, a seeded noise, the frame
                                            context's tensors (head_inputs.py lists them and their shapes)
    forward(query_hidden (B, Q, H), **side) -> (B, N, 4) per-step dx, dy, heading, speed; or a dict with
                                            'waypoints' (B, N, 4) and named extras the trajectory reports

Shipped: `mlp` (one MLP over the query tokens' states; the round-1 head, same weights for one token) and
`gru` (a GRU unrolled over the waypoints from the query tokens' states: ORION's planner family at toy size);
driving_heads.py: `command_modes` (ORION), `meta_decision` (MindDrive), `route_speed` (SimLingo);
diffusion_head.py: `ddim_planner` (ReCogDrive); vae_planners.py: `orion_vae`, `minddrive_vae` (ORION's and MindDrive's
planners as published).
"""

from __future__ import annotations

import torch
from torch import nn

from ...errors import ConfigError, expect


STEP = 4   # a waypoint step: dx, dy, heading, speed


def mlp(width_in: int, hidden: int, width_out: int) -> nn.Sequential:
    """Linear, GELU, Linear."""
    return nn.Sequential(nn.Linear(width_in, hidden), nn.GELU(), nn.Linear(hidden, width_out))


def mlp_stack(width_in: int, hidden: list[int], width_out: int, act=nn.ReLU, last_bias: bool = True) -> nn.Sequential:
    """Linear + act per hidden width, then Linear to width_out (indices 0, 2, 4, ...: the published adaptors' and
    heads' state-dict names: SimLingo's wp_encoder (ReLU), route / speed heads (SiLU, no last bias))."""
    layers, width = [], width_in
    for w in hidden:
        layers += [nn.Linear(width, w), act()]
        width = w
    return nn.Sequential(*layers, nn.Linear(width, width_out, bias=last_bias))


class WaypointHead(nn.Module):
    plugin_name = ""
    side_inputs: tuple[str, ...] = ()   # head_inputs.py SIDE_INPUTS; none: forward(query_hidden) alone

    def __init__(self, config: dict):
        super().__init__()
        self.config = dict(config)
        self.query_tokens = int(config.get("query_tokens", 1))
        self.num_waypoints = int(config["num_waypoints"])

    @staticmethod
    def checked(name: str, config: dict, keys: tuple[str, ...]) -> dict:
        bad = [k for k in keys if not isinstance(config.get(k), int) or config[k] < 1]
        expect(not bad, ConfigError, f"head {name!r}: {bad} must be positive integers (config {config})")
        return config


def head_config(spec) -> dict:
    """A preset's head config from its spec (a checkpoint's comes from its head file)."""
    return {"num_waypoints": spec.num_waypoints, "head_hidden": spec.head_hidden,
            "query_tokens": spec.query_tokens * spec.num_passes, **spec.head_config}


class MlpHead(WaypointHead):

    def __init__(self, config: dict, hidden_size: int):
        super().__init__(config)
        self.mlp = nn.Sequential(nn.Linear(hidden_size * self.query_tokens, config["head_hidden"]), nn.GELU(),
                                 nn.Linear(config["head_hidden"], self.num_waypoints * 4))

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "MlpHead":
        return cls(cls.checked("mlp", config, ("num_waypoints", "head_hidden", "query_tokens")), hidden_size)

    def forward(self, query_hidden: torch.Tensor) -> torch.Tensor:
        raw = self.mlp(query_hidden.flatten(1))                                       # (B, N*4)
        return raw.view(-1, self.num_waypoints, 4)                                     # (B, N, 4)


class GruHead(WaypointHead):
    """h0 from the query tokens' states; each step's input is the previous step's output (zeros first)."""

    def __init__(self, config: dict, hidden_size: int):
        super().__init__(config)
        width = config["head_hidden"]
        self.init = nn.Linear(hidden_size * self.query_tokens, width)
        self.cell = nn.GRUCell(4, width)
        self.out = nn.Linear(width, 4)

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "GruHead":
        return cls(cls.checked("gru", config, ("num_waypoints", "head_hidden", "query_tokens")), hidden_size)

    def forward(self, query_hidden: torch.Tensor) -> torch.Tensor:
        state = torch.tanh(self.init(query_hidden.flatten(1)))                         # (B, W)
        step = query_hidden.new_zeros(query_hidden.shape[0], 4)
        steps = []
        for _ in range(self.num_waypoints):
            state = self.cell(step, state)
            step = self.out(state)                                                     # (B, 4)
            steps.append(step)
        return torch.stack(steps, dim=1)                                               # (B, N, 4)
