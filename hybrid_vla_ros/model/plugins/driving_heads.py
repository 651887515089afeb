"""Heads shaped like the published driving VLAs' planners (issue 38, item 2), at any size; each reads what its
model's planner reads (head_inputs.py: side inputs) and runs whole on the suffix side:

- `command_modes` (ORION): one plan per planner mode from the query token's state; the frame's route command picks
  the one published (reported as the extras `mode`, `mode_command`).
- `meta_decision` (MindDrive): logits over K meta-action tokens at a named position of the decision pass, read
  through `decision_rows` (K, H): the LLM's lm_head rows of those tokens (random in a fresh model; the shipped
  `minddrive` mapping converts to `minddrive_vae`, vae_planners.py, which holds the whole lm_head); the chosen
  action picks one of K planned modes (`decision`, `decision_logits`); a path per route command beside it.
- `route_speed` (SimLingo): route and speed waypoints from learned query embeddings (model/prompt_embeddings.py).
(ReCogDrive's `ddim_planner`: diffusion_head.py.)

What each reads was taken from the published inference code (ORION `orion.py` / `orion_head.py`, MindDrive
`minddrive.py`, SimLingo `driving.py` / `adaptors.py`); the module trees here are written to that shape at any
width, not copied. Where this differs: ORION's planner is a VAE latent + GRU (a sampled latent), here an MLP per
mode; their planners as published, under their checkpoints' names: vae_planners.py (`orion_vae`, `minddrive_vae`).
"""

from __future__ import annotations

import torch
from torch import nn

from ...errors import ConfigError, expect
from ...types import NAV_COMMANDS
from .heads import STEP, WaypointHead, mlp as _mlp, mlp_stack


# ORION's planner modes, in its command2hot order (CARLA's RoadOption - 1; VOID -> lane follow)
ORION_MODES = ["turn left", "turn right", "go straight", "follow lane", "change lane left", "change lane right"]
# MindDrive's speed meta-actions, in its SPEED_MAPPING order (the decision pass's 7 tokens)
MINDDRIVE_SPEEDS = ["maintain_moderate_speed", "stop", "maintain_slow_speed", "speed_up", "slow_down",
                    "maintain_fast_speed", "slow_down_rapidly"]


def _mode_of(command: torch.Tensor, mode_commands: list[str], fallback: str = "follow lane") -> torch.Tensor:
    """command (B, len(NAV_COMMANDS)) one-hot -> (B,) the index in mode_commands of its command; a command with no
    mode of its own ("arrive"), or none known (all zero), takes `fallback`'s."""
    lookup = [mode_commands.index(c) if c in mode_commands else mode_commands.index(fallback) for c in NAV_COMMANDS]
    known = command.sum(dim=1) > 0
    index = torch.tensor(lookup, device=command.device)[command.argmax(dim=1)]
    return torch.where(known, index, mode_commands.index(fallback))


def _check_modes(name: str, modes) -> list[str]:
    expect(isinstance(modes, list) and modes and all(m in NAV_COMMANDS for m in modes) and "follow lane" in modes
           and len(set(modes)) == len(modes), ConfigError,
           f"head {name!r}: mode_commands={modes!r}, expected distinct NAV_COMMANDS names including 'follow lane' "
           f"(the fallback), one per planner mode in the checkpoint's order")
    return list(modes)


class CommandModesHead(WaypointHead):
    """config: num_waypoints, head_hidden, query_tokens; mode_commands (default ORION_MODES): the command each
    planner mode is for. The planner maps the query tokens' states to every mode's plan; the command picks one."""
    side_inputs = ("command",)

    def __init__(self, config: dict, hidden_size: int):
        super().__init__(config)
        self.mode_commands = _check_modes("command_modes", config.get("mode_commands", ORION_MODES))
        self.modes = len(self.mode_commands)
        self.planner = _mlp(hidden_size * self.query_tokens, config["head_hidden"],
                            self.modes * self.num_waypoints * STEP)

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "CommandModesHead":
        return cls(cls.checked("command_modes", config, ("num_waypoints", "head_hidden", "query_tokens")), hidden_size)

    def forward(self, query_hidden: torch.Tensor, command: torch.Tensor) -> dict:
        plans = self.planner(query_hidden.flatten(1)).view(-1, self.modes, self.num_waypoints, STEP)  # (B, M, N, 4)
        mode = _mode_of(command, self.mode_commands)                                    # (B,)
        chosen = plans[torch.arange(plans.shape[0], device=plans.device), mode]        # (B, N, 4)
        return {"waypoints": chosen, "mode": mode, "mode_command": [self.mode_commands[int(m)] for m in mode]}


class MetaDecisionHead(WaypointHead):
    """MindDrive's two heads. Decision: the logits over K meta-action tokens at `decision_position` (default -2:
    the token before the answer's, as MindDrive reads it) of pass `decision_pass`, through `decision_rows` (K, H),
    the lm_head rows of `decision_tokens`; the argmax picks one of K planned modes. Action: the last pass's first
    query token plans every mode (the waypoints); its second, with `path_points` > 0, a path per route command
    (`mode_commands`, default ORION_MODES), reported as the extra `path` ((path_points, 2) positions, m).
    config: num_waypoints, head_hidden, query_tokens (per pass: 2 with a path, else 1 or more); decision_tokens,
    decision_labels (default MINDDRIVE_SPEEDS), decision_pass (0), decision_position (-2), path_points (0)."""
    side_inputs = ("sequence", "command")

    def __init__(self, config: dict, hidden_size: int, per_pass: int):
        super().__init__(config)
        tokens, labels = config.get("decision_tokens"), config.get("decision_labels", MINDDRIVE_SPEEDS)
        expect(isinstance(tokens, list) and tokens and all(isinstance(t, int) and t >= 0 for t in tokens) and
               isinstance(labels, list) and len(labels) == len(tokens), ConfigError,
               f"head 'meta_decision': decision_tokens (token ids) and decision_labels (one per id) must be equal-"
               f"length non-empty lists (got {tokens!r}, {labels!r})")
        self.labels = [str(label) for label in labels]
        self.decision_pass = int(config.get("decision_pass", 0))
        self.position = int(config.get("decision_position", -2))
        self.path_points = int(config.get("path_points", 0))
        self.per_pass = per_pass
        expect(self.path_points == 0 or per_pass >= 2, ConfigError,
               f"head 'meta_decision': a path (path_points={self.path_points}) reads a second query token per pass; "
               f"the prompt has {per_pass}")
        self.decision_rows = nn.Parameter(torch.randn(len(tokens), hidden_size) * hidden_size ** -0.5)  # (K, H)
        width = config["head_hidden"]
        self.planner = _mlp(hidden_size, width, len(tokens) * self.num_waypoints * STEP)
        if self.path_points:
            self.mode_commands = _check_modes("meta_decision", config.get("mode_commands", ORION_MODES))
            self.path = _mlp(hidden_size, width, len(self.mode_commands) * self.path_points * 2)

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "MetaDecisionHead":
        config = cls.checked("meta_decision", config, ("num_waypoints", "head_hidden", "query_tokens"))
        passes = spec.num_passes if spec is not None else 1
        expect(0 <= int(config.get("decision_pass", 0)) < passes, ConfigError,
               f"head 'meta_decision': decision_pass={config.get('decision_pass')!r}, the model has {passes} pass(es)")
        return cls(config, hidden_size, config["query_tokens"] // passes)

    def forward(self, query_hidden: torch.Tensor, sequence: torch.Tensor, command: torch.Tensor) -> dict:
        at = sequence[:, self.decision_pass, self.position]                            # (B, H)
        logits = at @ self.decision_rows.t()                                           # (B, K)
        choice = logits.argmax(dim=1)                                                  # (B,)
        action = query_hidden[:, -self.per_pass:]                                      # (B, q, H): the last pass's
        plans = self.planner(action[:, 0]).view(-1, len(self.labels), self.num_waypoints, STEP)   # (B, K, N, 4)
        rows = torch.arange(plans.shape[0], device=plans.device)
        out = {"waypoints": plans[rows, choice], "decision": [self.labels[int(c)] for c in choice],
               "decision_logits": logits}
        if self.path_points:
            paths = self.path(action[:, 1]).view(-1, len(self.mode_commands), self.path_points, 2)
            out["path"] = paths[rows, _mode_of(command, self.mode_commands)].cumsum(dim=1)   # (B, points, 2)
        return out


class RouteSpeedHead(WaypointHead):
    """SimLingo's two heads over its learned queries (the prompt's last route_queries + speed_queries tokens, in
    that order): route (route_queries, 2) positions from MLP(H, route_hidden..., 2) per query, cumulated, reported
    as the extra `route`; speed waypoints (speed_queries, 2) the same through MLP(H, speed_hidden..., 2): the
    trajectory (heading along each step, speed = |step| / waypoint_dt_s). config: num_waypoints (=
    speed_queries), query_tokens (= route_queries + speed_queries); route_queries (20), route_hidden ([512, 256]),
    speed_hidden ([256])."""

    def __init__(self, config: dict, hidden_size: int, dt_s: float):
        super().__init__(config)
        self.route_queries, self.dt_s = int(config.get("route_queries", 20)), dt_s
        self.route = mlp_stack(hidden_size, config.get("route_hidden", [512, 256]), 2, nn.SiLU, last_bias=False)
        self.speed = mlp_stack(hidden_size, config.get("speed_hidden", [256]), 2, nn.SiLU, last_bias=False)

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "RouteSpeedHead":
        config = cls.checked("route_speed", {"route_queries": 20, **config},
                             ("num_waypoints", "query_tokens", "route_queries"))
        expect(config["query_tokens"] == config["route_queries"] + config["num_waypoints"], ConfigError,
               f"head 'route_speed': query_tokens {config['query_tokens']} must be route_queries "
               f"{config['route_queries']} + num_waypoints (speed queries) {config['num_waypoints']}")
        return cls(config, hidden_size, spec.waypoint_dt_s if spec is not None else 0.25)

    def forward(self, query_hidden: torch.Tensor) -> dict:
        route = self.route(query_hidden[:, :self.route_queries]).cumsum(dim=1)        # (B, R, 2) positions
        steps = self.speed(query_hidden[:, self.route_queries:])                       # (B, N, 2) dx, dy
        heading = torch.atan2(steps[..., 1], steps[..., 0]).unsqueeze(-1)
        speed = steps.norm(dim=-1, keepdim=True) / self.dt_s
        return {"waypoints": torch.cat([steps, heading, speed], dim=-1), "route": route}
