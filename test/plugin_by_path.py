"""Plugins named by module path (`plugin_by_path:PooledScene`, `plugin_by_path:SpyHead`), not installed as a
package: the test directory is on sys.path, as for every test helper. Each records what it was given, so the
tests can check what docs/CHECKPOINTS.md says a plugin receives."""

import torch
from torch import nn

from hybrid_vla_ros.model.plugins import SceneEncoder, WaypointHead


class PooledScene(SceneEncoder):
    """Memoryless: each camera's image average-pooled to a grid x grid of cells, each cell's colour and the
    ego state projected to the LLM's width."""

    def __init__(self, config, hidden_size):
        super().__init__(config)
        self.num_tokens = self.tokens_for(config)
        self.pool = nn.AdaptiveAvgPool2d(config["grid"])
        self.proj = nn.Linear(3 + 2, hidden_size)
        self.seen = {}

    @classmethod
    def tokens_for(cls, config):
        return config["cameras"] * config["grid"] ** 2

    @classmethod
    def from_config(cls, config, hidden_size, spec=None):
        return cls(config, hidden_size)

    def forward(self, images, ego, stamp_ns):
        self.seen = {"images": (tuple(images.shape), images.dtype, images.device), "pixels": images.clone(),
                     "ego": (tuple(ego.shape), ego.dtype, ego.device), "ego_values": ego.tolist(),
                     "stamp_ns": stamp_ns, "grad": images.requires_grad or torch.is_grad_enabled(),
                     "inference_mode": torch.is_inference_mode_enabled()}
        cells = self.pool(images).flatten(2).transpose(1, 2).reshape(-1, 3)          # (N g g, 3)
        return self.proj(torch.cat([cells, ego.expand(cells.shape[0], 2)], dim=1))   # (N g g, hidden)


class SpyHead(WaypointHead):
    """A linear head over the query tokens that keeps what from_config was given."""

    def __init__(self, config, hidden_size, spec):
        super().__init__(config)
        self.received = (dict(config), hidden_size, spec)
        self.proj = nn.Linear(hidden_size * self.query_tokens, self.num_waypoints * 4)

    @classmethod
    def from_config(cls, config, hidden_size, spec=None):
        return cls(config, hidden_size, spec)

    def forward(self, query_hidden):
        return self.proj(query_hidden.flatten(1)).view(-1, self.num_waypoints, 4)


class NotAPlugin(nn.Module):
    """Has from_config, but subclasses neither SceneEncoder nor WaypointHead."""

    @classmethod
    def from_config(cls, config, hidden_size, spec=None):
        return cls()


class NoTokensFor(SceneEncoder):
    """A scene encoder that forgot tokens_for: the prompt cannot be laid out."""

    @classmethod
    def from_config(cls, config, hidden_size, spec=None):
        return cls(config)

    def forward(self, images, ego, stamp_ns):
        return images.new_zeros(1, 1)


def not_a_class(config, hidden_size, spec=None):
    return None
