"""ORION's and MindDrive's planners as published (issue 38): a VAE latent + GRU generative planner reading the LLM's
last-layer hidden state at a waypoint token, with the module tree and state-dict names of their checkpoints
(docs/sources/published_orion_minddrive.md, section a; written here from those notes at any width, not copied).

One branch, width H (the LLM's), latent L = 32, G = 4 GRU layers, T steps, M modes:
    present_distribution   Conv1d k=1 H -> 2H -> 2H -> H/2 (ReLU between; `encoder.conv{1,2,3}`), then
                           `last_conv.1` H/2 -> 2L: mu || log_sigma (clamped to [-5, 5])
    z = mu + exp(log_sigma) * noise          noise drawn from the frame's `noise_seed` (published: unseeded), so
                                             split and unsplit, and every replay, sample the same plan
    predict_model          GRU L -> H/4, G layers, h0 = the feature cut into G rows (G, B, H/4); every step's input
                           is z; then `linear1-3` H/4 -> H/2 -> H -> H (ReLU between)
    ego_fut_decoder        per step on cat(feature, future state) (2H): Linear 2H, ReLU, Linear 2H, ReLU, Linear M*2
                           -> (B, M, T, dx dy); the mode picked, cumulated to positions.
`future_distribution` (training only: its input holds the ground-truth offsets) is not built: the mappings drop it.

- `orion_vae` (ORION): one branch, 6 modes x 6 steps at `<waypoint_ego>` (the query token); the route command picks
  the mode in ORION's command2hot order (driving_heads.ORION_MODES).
- `minddrive_vae` (MindDrive): the decision over its 7 speed tokens (`lm_head.weight` rows at the decision pass's
  `decision_position`, log_softmax, argmax); the speed branch (7 modes x 6 steps) at the action pass's first query
  token (`<waypoint_ego>`), the path branch (`pw_*`, 6 modes x 20 points, 1 m apart) at its second
  (`<path_waypoint_ego>`), the path mode from the route command through MindDrive's PATH_MAPPING -> PA_MAPPING
  order (MINDDRIVE_PATHS). `lm_head.weight` is the whole LLM output table (V, H), as the checkpoint holds it.
"""

from __future__ import annotations

import torch
from torch import nn

from ...errors import ConfigError, expect
from .driving_heads import MINDDRIVE_SPEEDS, ORION_MODES, _check_modes, _mode_of
from .heads import WaypointHead

LATENT, GRU_LAYERS, LOG_SIGMA = 32, 4, (-5.0, 5.0)
# MindDrive's path modes in its PA_MAPPING order (lanefollow, straight, turn_left, change_lane_left, turn_right,
# change_lane_right): the route command (CARLA order, PATH_MAPPING) is mapped into this order
MINDDRIVE_PATHS = ["follow lane", "go straight", "turn left", "change lane left", "turn right", "change lane right"]


class Encoder1D(nn.Module):
    """DistributionEncoder1DV2: (B, C, 1) -> (B, out, 1) through Conv1d k=1 C -> 2C -> 2C -> out."""

    def __init__(self, width_in: int, width_out: int):
        super().__init__()
        self.conv1 = nn.Conv1d(width_in, 2 * width_in, 1)
        self.conv2 = nn.Conv1d(2 * width_in, 2 * width_in, 1)
        self.conv3 = nn.Conv1d(2 * width_in, width_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv3(torch.relu(self.conv2(torch.relu(self.conv1(x)))))


class DistributionModule(nn.Module):
    """(B, 1, C) -> mu, log_sigma (B, 1, L): a diagonal Gaussian over the latent."""

    def __init__(self, width_in: int, latent: int = LATENT):
        super().__init__()
        self.latent = latent
        self.encoder = Encoder1D(width_in, width_in // 2)
        self.last_conv = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Conv1d(width_in // 2, 2 * latent, 1))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.last_conv(self.encoder(features.transpose(1, 2))).transpose(1, 2)     # (B, 1, 2L)
        return out[..., :self.latent], out[..., self.latent:].clamp(*LOG_SIGMA)


class PredictModel(nn.Module):
    """GRU over the steps, then three linears: (T, B, L), h0 (G, B, H/G) -> (T, B, H)."""

    def __init__(self, latent: int, width: int, layers: int = GRU_LAYERS):
        super().__init__()
        hidden = width // layers
        self.gru = nn.GRU(input_size=latent, hidden_size=hidden, num_layers=layers)
        self.linear1 = nn.Linear(hidden, 2 * hidden)
        self.linear2 = nn.Linear(2 * hidden, 4 * hidden)
        self.linear3 = nn.Linear(4 * hidden, width)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        x, _ = self.gru(x, h0)
        return self.linear3(torch.relu(self.linear2(torch.relu(self.linear1(x)))))


def decoder(width: int, modes: int) -> nn.Sequential:
    """ego_fut_decoder: 2H -> 2H -> 2H -> modes * 2 (indices 0, 2, 4)."""
    return nn.Sequential(nn.Linear(2 * width, 2 * width), nn.ReLU(), nn.Linear(2 * width, 2 * width), nn.ReLU(),
                         nn.Linear(2 * width, 2 * modes))


def vae_plan(present: DistributionModule, predict: PredictModel, decode: nn.Sequential, feature: torch.Tensor,
             steps: int, noise: torch.Tensor) -> torch.Tensor:
    """feature (B, H), noise (B, 1, L) -> every mode's per-step offsets (B, M, T, 2)."""
    feature = feature.contiguous()
    batch, width = feature.shape
    mu, log_sigma = present(feature.unsqueeze(1))                                      # (B, 1, L)
    z = mu + log_sigma.exp() * noise.to(mu)                                            # (B, 1, L)
    layers = predict.gru.num_layers
    h0 = feature.reshape(batch, layers, width // layers).transpose(0, 1).contiguous()  # (G, B, H/G)
    # (contiguous: a GRU of loaded weights may take another kernel on a stride-0 input, a few ulp apart)
    future = predict(z.transpose(0, 1).expand(steps, batch, -1).contiguous(), h0)      # (T, B, H)
    states = torch.cat([feature.unsqueeze(0).expand(steps, -1, -1), future], dim=-1)   # (T, B, 2H)
    return decode(states).view(steps, batch, -1, 2).permute(1, 2, 0, 3)                # (B, M, T, 2)


def noises(seed: int, count: int, batch: int, latent: int = LATENT) -> list[torch.Tensor]:
    """`count` draws (B, 1, L) of N(0, 1) from one generator seeded by the frame (CPU: the same on any device)."""
    generator = torch.Generator().manual_seed(int(seed))
    return [torch.randn(batch, 1, latent, generator=generator) for _ in range(count)]


def as_steps(offsets: torch.Tensor, dt_s: float) -> torch.Tensor:
    """(B, T, 2) dx, dy -> (B, T, 4) dx, dy, heading along the step, speed |step| / dt."""
    heading = torch.atan2(offsets[..., 1], offsets[..., 0]).unsqueeze(-1)
    return torch.cat([offsets, heading, offsets.norm(dim=-1, keepdim=True) / dt_s], dim=-1)


def _branch(owner: nn.Module, prefix: str, width: int, modes: int) -> None:
    setattr(owner, f"{prefix}present_distribution", DistributionModule(width))
    setattr(owner, f"{prefix}predict_model", PredictModel(LATENT, width))
    setattr(owner, f"{prefix}ego_fut_decoder", decoder(width, modes))


def _check_width(name: str, width: int) -> None:
    expect(width % GRU_LAYERS == 0 and width % 2 == 0, ConfigError,
           f"head {name!r}: the LLM width {width} must divide into {GRU_LAYERS} GRU layers (h0 is the feature cut "
           f"into {GRU_LAYERS} rows)")


class OrionVaeHead(WaypointHead):
    """config: num_waypoints (6), query_tokens (1: `<waypoint_ego>`); mode_commands (default ORION_MODES), seed."""
    side_inputs = ("command", "noise_seed")

    def __init__(self, config: dict, hidden_size: int, dt_s: float):
        super().__init__(config)
        _check_width("orion_vae", hidden_size)
        self.mode_commands = _check_modes("orion_vae", config.get("mode_commands", ORION_MODES))
        self.dt_s = dt_s
        _branch(self, "", hidden_size, len(self.mode_commands))

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "OrionVaeHead":
        config = cls.checked("orion_vae", config, ("num_waypoints", "query_tokens"))
        return cls(config, hidden_size, spec.waypoint_dt_s if spec is not None else 0.5)

    def forward(self, query_hidden: torch.Tensor, command: torch.Tensor, noise_seed: int) -> dict:
        feature = query_hidden[:, -1]                                                  # (B, H) <waypoint_ego>
        noise, = noises(noise_seed, 1, feature.shape[0])
        plans = vae_plan(self.present_distribution, self.predict_model, self.ego_fut_decoder, feature,
                         self.num_waypoints, noise)                                    # (B, 6, T, 2)
        mode = _mode_of(command, self.mode_commands)                                   # (B,)
        chosen = plans[torch.arange(plans.shape[0], device=plans.device), mode]       # (B, T, 2)
        return {"waypoints": as_steps(chosen, self.dt_s), "mode": mode,
                "mode_command": [self.mode_commands[int(m)] for m in mode]}


class MindDriveVaeHead(WaypointHead):
    """config: num_waypoints (6 speed steps), query_tokens (2 per pass: <waypoint_ego>, <path_waypoint_ego>);
    decision_tokens (the 7 speed tokens' ids), decision_labels (MINDDRIVE_SPEEDS), decision_pass (0),
    decision_position (-2), path_points (20), path_commands (MINDDRIVE_PATHS), vocab_size (default the spec's),
    seed."""
    side_inputs = ("sequence", "command", "noise_seed")

    def __init__(self, config: dict, hidden_size: int, per_pass: int, vocab: int, dt_s: float):
        super().__init__(config)
        _check_width("minddrive_vae", hidden_size)
        tokens, labels = config.get("decision_tokens"), config.get("decision_labels", MINDDRIVE_SPEEDS)
        expect(isinstance(tokens, list) and tokens and all(isinstance(t, int) and 0 <= t < vocab for t in tokens)
               and isinstance(labels, list) and len(labels) == len(tokens), ConfigError,
               f"head 'minddrive_vae': decision_tokens (ids below the vocabulary's {vocab}) and decision_labels (one "
               f"per id) must be equal-length non-empty lists (got {tokens!r}, {labels!r})")
        expect(per_pass >= 2, ConfigError, f"head 'minddrive_vae': the action pass must end with two query tokens "
                                           f"(<waypoint_ego>, <path_waypoint_ego>); it has {per_pass}")
        self.tokens, self.labels = list(tokens), [str(label) for label in labels]
        self.decision_pass = int(config.get("decision_pass", 0))
        self.position = int(config.get("decision_position", -2))
        self.path_points = int(config.get("path_points", 20))
        self.path_commands = _check_modes("minddrive_vae", config.get("path_commands", MINDDRIVE_PATHS))
        self.per_pass, self.dt_s = per_pass, dt_s
        self.lm_head = nn.Linear(hidden_size, vocab, bias=False)                        # (V, H)
        _branch(self, "", hidden_size, len(self.tokens))
        _branch(self, "pw_", hidden_size, len(self.path_commands))

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "MindDriveVaeHead":
        config = cls.checked("minddrive_vae", config, ("num_waypoints", "query_tokens"))
        passes = spec.num_passes if spec is not None else 1
        expect(0 <= int(config.get("decision_pass", 0)) < passes, ConfigError,
               f"head 'minddrive_vae': decision_pass={config.get('decision_pass')!r}, the model has {passes} pass(es)")
        vocab = int(config.get("vocab_size") or (spec.vocab_size if spec is not None else 0))
        return cls(config, hidden_size, config["query_tokens"] // passes, vocab,
                   spec.waypoint_dt_s if spec is not None else 0.5)

    def decide(self, sequence: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """sequence (B, P, S, H) -> log-probabilities over the speed tokens (B, K) and the argmax (B,)."""
        at = sequence[:, self.decision_pass, self.position]                            # (B, H)
        rows = self.lm_head.weight[self.tokens]                                        # (K, H)
        log_probs = torch.log_softmax(at @ rows.t(), dim=-1)                           # (B, K)
        return log_probs, log_probs.argmax(dim=-1)

    def forward(self, query_hidden: torch.Tensor, sequence: torch.Tensor, command: torch.Tensor,
                noise_seed: int) -> dict:
        log_probs, speed = self.decide(sequence)
        action = query_hidden[:, -self.per_pass:]                                      # (B, q, H): the action pass
        speed_noise, path_noise = noises(noise_seed, 2, action.shape[0])
        speeds = vae_plan(self.present_distribution, self.predict_model, self.ego_fut_decoder, action[:, 0],
                          self.num_waypoints, speed_noise)                             # (B, 7, 6, 2)
        paths = vae_plan(self.pw_present_distribution, self.pw_predict_model, self.pw_ego_fut_decoder, action[:, 1],
                         self.path_points, path_noise)                                 # (B, 6, 20, 2)
        rows = torch.arange(speeds.shape[0], device=speeds.device)
        path_mode = _mode_of(command, self.path_commands)                              # (B,)
        return {"waypoints": as_steps(speeds[rows, speed], self.dt_s),
                "decision": [self.labels[int(s)] for s in speed], "decision_log_probs": log_probs,
                "path": paths[rows, path_mode].cumsum(dim=1),                          # (B, 20, 2) positions
                "path_command": [self.path_commands[int(m)] for m in path_mode]}
