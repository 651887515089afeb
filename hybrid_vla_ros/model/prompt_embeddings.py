"""Prompt rows that are not vocabulary embeddings (issue 38, item 3; SimLingo's shape), written into the token
embeddings before block 0 of every pass:

- learned query embeddings (spec.query_embeddings): the last `query_tokens` rows of each pass (the query tokens the
  head reads) take learned tables instead of the query token's vocabulary row: true = one (query_tokens, H) table
  `queries.0`; a list of group sizes (summing to query_tokens) = one table per group, in order (SimLingo: [20, 10],
  its route and speed queries, `queries.0` (20, H) and `queries.1` (10, H));
- numeric slots (spec.prompt_slots): each slot's inputs, fixed-size tensors of the frame context
  (SLOT_INPUT_SIZES), go through the slot's MLP adaptor into one row each, written at the slot tokens the prompt
  holds for them, in slot order then input order (SimLingo's <TARGET_POINT> pair, through its `wp_encoder`:
  its target point and the one after it; the package's context has the route's target point and goal, which
  tiny-simlingo and the simlingo mapping feed instead). A slot: {"name", "inputs": [context tensor names], "hidden": [widths]}: the
  adaptor is Linear(in, w1) ReLU ... Linear(wk, H), `in` the inputs' common size.

The prefix applies them in its embedding step (engine/embedding.py, whole and chunked frames: the rows are text,
no camera's features land there); the unsplit reference applies the same module through a forward hook on the
embedding table (VLAModel.prompt_embeddings_applied), so both hand block 0 the very same rows.
"""

from __future__ import annotations

import torch
from torch import nn

from ..context import FrameContext
from ..errors import ConfigError, expect
from .plugins.heads import mlp_stack

# The context tensors a slot may read, by their (fixed) number of values
SLOT_INPUT_SIZES = {"target_point": 2, "goal_point": 2, "command": 7, "ego_status": 4, "command_distance_m": 1,
                    "navigation_known": 1, "ego_status_known": 4, "pose_known": 1}


def check_prompt_embeddings(spec) -> None:
    """The spec's query_embeddings / prompt_slots, checked at load (ConfigError saying what)."""
    where = f"spec '{spec.name}'"
    groups = spec.query_embeddings
    expect(isinstance(groups, bool) or (isinstance(groups, list) and groups and
                                        all(isinstance(g, int) and g > 0 for g in groups) and
                                        sum(groups) == spec.query_tokens), ConfigError,
           f"{where}: query_embeddings={groups!r}, expected true, false or a list of group sizes summing to "
           f"query_tokens ({spec.query_tokens})")
    expect(not (spec.query_embeddings or spec.prompt_slots) or spec.action_head == "waypoints", ConfigError,
           f"{where}: prompt embeddings are served for waypoint heads; an action-token model's decode steps embed "
           f"vocabulary tokens only")
    slots = spec.prompt_slots
    expect(isinstance(slots, list) and all(isinstance(s, dict) for s in slots), ConfigError,
           f"{where}: prompt_slots must be a list of {{name, inputs, hidden}} objects")
    names = [s.get("name") for s in slots]
    expect(all(isinstance(n, str) and n for n in names) and len(set(names)) == len(names), ConfigError,
           f"{where}: each prompt slot needs a unique non-empty 'name' (got {names})")
    for slot in slots:
        unknown = sorted(set(slot) - {"name", "inputs", "hidden"})
        inputs, hidden = slot.get("inputs"), slot.get("hidden", [])
        expect(not unknown, ConfigError, f"{where}: prompt slot {slot['name']!r} has unknown keys {unknown}")
        expect(isinstance(inputs, list) and inputs and all(i in SLOT_INPUT_SIZES for i in inputs) and
               len({SLOT_INPUT_SIZES[i] for i in inputs}) == 1, ConfigError,
               f"{where}: prompt slot {slot['name']!r}: inputs={inputs!r}, expected a non-empty list of context "
               f"tensors of one size, from {SLOT_INPUT_SIZES}")
        expect(isinstance(hidden, list) and all(isinstance(w, int) and w > 0 for w in hidden), ConfigError,
               f"{where}: prompt slot {slot['name']!r}: hidden={hidden!r}, expected a list of positive widths")


class PromptEmbeddings(nn.Module):
    def __init__(self, spec, hidden_size: int):
        super().__init__()
        self.query_tokens = spec.query_tokens
        self.slots = [dict(slot) for slot in spec.prompt_slots]
        groups = spec.query_embeddings if isinstance(spec.query_embeddings, list) else \
            [spec.query_tokens] if spec.query_embeddings else []
        self.queries = nn.ParameterList(nn.Parameter(torch.randn(n, hidden_size) * 0.02) for n in groups) \
            if groups else None                                                         # (n_i, H) each
        self.adaptors = nn.ModuleDict({slot["name"]: mlp_stack(SLOT_INPUT_SIZES[slot["inputs"][0]],
                                                              slot.get("hidden", []), hidden_size)
                                       for slot in self.slots})
        self.slot_count = sum(len(slot["inputs"]) for slot in self.slots)

    def forward(self, input_ids: torch.Tensor, embeds: torch.Tensor, context, slot_token_id: int) -> torch.Tensor:
        """input_ids (P, S), embeds (P, S, H) -> embeds with the query and slot rows written (a new tensor)."""
        out = embeds.clone()
        if self.queries is not None:
            out[:, -self.query_tokens:] = self.table().to(out.dtype)
        if self.slots:
            out[:, self._slot_positions(input_ids, slot_token_id)] = self.slot_rows(context).to(out.dtype)
        return out

    def table(self) -> torch.Tensor:
        """The query rows, every group in order: (query_tokens, H)."""
        return torch.cat(list(self.queries))

    def slot_rows(self, context) -> torch.Tensor:
        """-> (slot tokens, H): each slot's inputs through its adaptor, in order."""
        tensors = (context if context is not None else FrameContext()).as_tensors()
        rows = []
        for slot in self.slots:
            adaptor = self.adaptors[slot["name"]]
            weight = adaptor[0].weight
            values = torch.stack([tensors[name].flatten() for name in slot["inputs"]])  # (inputs, in)
            rows.append(adaptor(values.to(weight.device, weight.dtype)))                 # (inputs, H)
        return torch.cat(rows)

    def _slot_positions(self, input_ids: torch.Tensor, slot_token_id: int) -> torch.Tensor:
        positions = (input_ids[0] == slot_token_id).nonzero().squeeze(-1)              # (slot tokens,)
        expect(positions.numel() == self.slot_count, ConfigError,
               f"prompt: {positions.numel()} slot tokens (id {slot_token_id}), the model's slots fill "
               f"{self.slot_count}")
        return positions
