"""The ego history as prompt tokens, and the unguided prompt of 1.5's guidance (alpamayo_r1/models/
delta_tokenizer.py, base_model.py `tokenize_history_trajectory` / `fuse_traj_tokens`; alpamayo1_5/nav_utils.py
`remove_nav_text`; alpamayo2_super/models/delta_tokenizer.py). The 16 history positions become 16 x 3 deltas (the
first from the origin; 15 x 3 without pad_origin_at_beginning), each scaled from [min, max] to num_bins bins, offset
by hist_token_start_idx, and replace the prompt's 48 (45) `<|traj_history|>`."""

from __future__ import annotations

import torch

from ....errors import InputError, expect


def history_tokens(xyz: torch.Tensor, history: dict, start: int) -> torch.Tensor:
    """xyz (B, T, 3) -> (B, T*3) token ids; (B, (T-1)*3) without pad_origin_at_beginning (Alpamayo 2 Super's
    option: the history ends at the ego origin, so only the T-1 steps between poses are encoded)."""
    xyz = xyz.float()
    padded = torch.nn.functional.pad(xyz, [0, 0, 1, 0]) if history.get("pad_origin_at_beginning", True) else xyz
    delta = padded[:, 1:] - padded[:, :-1]                                              # (B, T or T-1, 3)
    low = torch.tensor(history["ego_xyz_min"], dtype=delta.dtype)
    high = torch.tensor(history["ego_xyz_max"], dtype=delta.dtype)
    bins = history["num_bins"]
    scaled = ((delta - low) / (high - low) * (bins - 1)).round().long().clamp(0, bins - 1)
    return scaled.flatten(1) + start                                                    # (B, T*3)


def fuse_history(input_ids: torch.Tensor, tokens: torch.Tensor, placeholder: int) -> torch.Tensor:
    """The prompt's `<|traj_history|>` pads, in order, replaced by the history tokens (B, K)."""
    mask = input_ids == placeholder
    expect(int(mask.sum()) == tokens.numel(), InputError,
           f"prompt: {int(mask.sum())} <|traj_history|> placeholders (id {placeholder}) for {tokens.numel()} "
           f"history tokens (16 poses x 3 = 48 in the releases)")
    return input_ids.masked_scatter(mask, tokens.to(input_ids.dtype))


def without_route(input_ids: torch.Tensor, route_start: int, route_end: int) -> torch.Tensor:
    """(1, S) -> (1, S') with `<|route_start|>` .. `<|route_end|>` (inclusive) removed: the unguided prompt."""
    ids = input_ids[0].tolist()
    expect(route_start in ids and route_end in ids, InputError,
           f"prompt: guidance needs a route span (<|route_start|> {route_start} .. <|route_end|> {route_end}); "
           f"the prompt has none")
    first, last = ids.index(route_start), ids.index(route_end)
    expect(first < last, InputError, f"prompt: <|route_end|> at {last} before <|route_start|> at {first}")
    return torch.tensor([ids[:first] + ids[last + 1:]], dtype=input_ids.dtype)
