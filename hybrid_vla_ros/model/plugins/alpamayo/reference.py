"""The unsplit reference of an Alpamayo release, one process, batch 1: fuse the ego history into the prompt,
prefill and sample the reasoning (decode.py), run the expert's flow matching over the VLM's cache (expert.py,
flow.py) and turn the actions into the trajectory (action_space.py). With `guidance` (Alpamayo 1.5), a second
cache from the prompt without its route span, fed the same reasoning tokens, gives the unguided velocity
(alpamayo1_5/models/alpamayo1_5.py `sample_trajectories_from_data_with_vlm_rollout_cfg_nav`).

The ego history as prompt tokens (history_tokens, fuse_history) and 1.5's unguided prompt (without_route): the
releases' alpamayo_r1/models/delta_tokenizer.py, base_model.py `tokenize_history_trajectory` / `fuse_traj_tokens`,
alpamayo1_5/nav_utils.py `remove_nav_text`, alpamayo2_super/models/delta_tokenizer.py. The 16 history positions become 16 x 3 deltas (the
first from the origin; 15 x 3 without pad_origin_at_beginning), each scaled from [min, max] to num_bins bins, offset
by hist_token_start_idx, and replace the prompt's 48 (45) `<|traj_history|>`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ....errors import InputError, expect, expect_finite
from .config import check_guidance
from .decode import Decoded, Prompt, Sampling, decode, fed_tokens, feed, new_cache, prefill
from .expert import ExpertContext
from .flow import FlowSettings, sample


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


@dataclass
class AlpamayoInputs:
    """As the published pipeline has them: the chat template's ids with 48 (or 45) `<|traj_history|>` pads, the
    processor's pixels of the cameras x 4 frames (one grid row per image), the ego history in the t0 frame."""
    input_ids: torch.Tensor          # (1, S)
    pixel_values: torch.Tensor       # (P, 3 * temporal_patch * patch^2)
    image_grid_thw: torch.Tensor     # (images, 3)
    ego_history_xyz: torch.Tensor    # (1, 1, T, 3), T = 16
    ego_history_rot: torch.Tensor    # (1, 1, T, 3, 3)
    image_keys: tuple | None = None  # one per image (camera, stamp): the split's prefix may keep its encoding


@dataclass
class AlpamayoResult:
    xyz: torch.Tensor                # (N, 3) future positions in the t0 ego frame, 0.1 s apart
    rotation: torch.Tensor           # (N, 3, 3)
    actions: torch.Tensor            # (N, 2) normalised acceleration, curvature
    tokens: list[int]                # the sampled reasoning (ends with <|traj_future_start|> when stopped)
    stopped: bool
    timings: dict = field(default_factory=dict)   # ms: reasoning (prefill + decode), unguided, flow, total

    @property
    def heading(self) -> torch.Tensor:
        return torch.atan2(self.rotation[:, 1, 0], self.rotation[:, 0, 0])               # (N,)


def _shape(name: str, tensor, shape: tuple) -> None:
    expect(isinstance(tensor, torch.Tensor), InputError, f"Alpamayo input {name}: expected a tensor, got "
           f"{type(tensor).__name__}")
    ok = tensor.dim() == len(shape) and all(w is None or w == s for w, s in zip(shape, tensor.shape))
    expect(ok, InputError, f"Alpamayo input {name}: shape {tuple(tensor.shape)}, expected "
           f"{tuple('*' if w is None else w for w in shape)}")


def _check_images(model, inputs: AlpamayoInputs) -> None:
    vision = model.config.vlm.vision_config
    grid = inputs.image_grid_thw
    expect(not grid.is_floating_point() and bool((grid > 0).all()), InputError,
           f"Alpamayo input image_grid_thw: expected positive integers, got {grid.tolist()}")
    patches = int(grid.prod(-1).sum())
    width = 3 * vision.temporal_patch_size * vision.patch_size ** 2
    _shape("pixel_values", inputs.pixel_values, (patches, width))
    expect_finite(inputs.pixel_values, "nonfinite_input", "Alpamayo input pixel_values")
    tokens = int((inputs.input_ids == model.image_token_id).sum())
    expect(tokens == patches // vision.spatial_merge_size ** 2, InputError,
           f"Alpamayo input: {tokens} image tokens in input_ids, the {grid.shape[0]} images' grids make "
           f"{patches // vision.spatial_merge_size ** 2}")


def check_inputs(model, inputs: AlpamayoInputs) -> None:
    """InputError / NonFiniteError naming the first input that does not fit the model."""
    _shape("input_ids", inputs.input_ids, (1, None))
    expect(not inputs.input_ids.is_floating_point(), InputError, "Alpamayo input input_ids: expected integer ids")
    _shape("image_grid_thw", inputs.image_grid_thw, (None, 3))
    _check_images(model, inputs)
    _shape("ego_history_xyz", inputs.ego_history_xyz, (1, 1, None, 3))
    steps = inputs.ego_history_xyz.shape[2]
    expect(steps >= 4, InputError, f"Alpamayo input ego_history_xyz: {steps} poses, expected >= 4 (16 released)")
    _shape("ego_history_rot", inputs.ego_history_rot, (1, 1, steps, 3, 3))
    for name in ("ego_history_xyz", "ego_history_rot"):
        expect_finite(getattr(inputs, name), "nonfinite_input", f"Alpamayo input {name}")


def fused_prompt(model, inputs: AlpamayoInputs) -> Prompt:
    cfg = model.config
    hist = history_tokens(inputs.ego_history_xyz[:, 0], cfg.history, cfg.hist_token_start_idx)   # (1, T*3)
    ids = fuse_history(inputs.input_ids.long(), hist, cfg.traj_token_ids["history"])
    return Prompt(ids, inputs.pixel_values.to(model.vlm.dtype), inputs.image_grid_thw.long(), inputs.image_keys)


def offset_of(decoded: Decoded, prompt_len: int) -> int:
    """Sequence index right after `<|traj_future_start|>` (after the last token when it never came)."""
    return prompt_len + len(decoded.tokens)


def unguided_context(model, prompt: Prompt, decoded: Decoded, offset: int, sampling: Sampling) -> ExpertContext:
    """The prompt without its route span, prefilled, fed the reasoning the guided cache holds."""
    special = model.config.special_ids
    check_guidance(model.config)
    ids = without_route(prompt.input_ids, special["route_start"], special["route_end"])          # (1, S')
    cache = new_cache(model.vlm)
    _, delta = prefill(model.vlm, Prompt(ids, prompt.pixel_values, prompt.image_grid_thw), model.image_token_id,
                       cache)
    held = fed_tokens(decoded.tokens, sampling.max_new_tokens)
    if held:
        feed(model.vlm, held, ids.shape[1], delta, cache)
    return ExpertContext(model, cache, offset - prompt.input_ids.shape[1] + ids.shape[1], delta)


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


@torch.inference_mode()
def run_reference(model, inputs: AlpamayoInputs, seed: int = 0, sampling: Sampling = Sampling(),
                  flow: FlowSettings | None = None, guidance: bool = False) -> AlpamayoResult:
    """One frame end to end; the same seed gives the same reasoning and trajectory."""
    check_inputs(model, inputs)
    flow = flow or FlowSettings.from_config(model.config.flow)
    cfg, t0 = model.config, time.perf_counter()
    generator = torch.Generator().manual_seed(seed)
    prompt = fused_prompt(model, inputs)
    decoded = decode(model.vlm, prompt, model.image_token_id, cfg.traj_token_ids["future_start"], cfg.banned, sampling,
                     generator)
    timings = {"reasoning_ms": _ms(t0)}
    offset, t1 = offset_of(decoded, prompt.input_ids.shape[1]), time.perf_counter()
    unguided = unguided_context(model, prompt, decoded, offset, sampling) if guidance else None
    timings["unguided_ms"], t2 = _ms(t1), time.perf_counter()
    guided = ExpertContext(model, decoded.cache, offset, decoded.rope_delta)
    shape = (1, *model.action_space.dims)                                                        # (1, N, 2)
    actions = sample(guided.velocity, shape, flow, generator, unguided.velocity if unguided else None,
                     dtype=model.expert_dtype)                                                   # (1, N, 2)
    xyz, rot = model.action_space.to_trajectory(actions, inputs.ego_history_xyz[:, 0, :, :],
                                                inputs.ego_history_rot[:, 0])
    expect_finite(xyz, "nonfinite_output", "Alpamayo trajectory")
    timings.update(flow_ms=_ms(t2), total_ms=_ms(t0))
    return AlpamayoResult(xyz[0], rot[0], actions[0].float(), decoded.tokens, decoded.stopped, timings)
