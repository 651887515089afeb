"""A driving frame -> an Alpamayo release's inputs (model/plugins/alpamayo/reference.py AlpamayoInputs), ROS-free:
the last 4 frames of each of the release's cameras (4; Alpamayo 2 Super 6), the ego history from the poses kept,
the prompt's token ids.

Images: as Qwen3-VL's image processor lays them out (transformers Qwen2VLImageProcessor: rescaled to [0, 1],
normalised with mean = std = 0.5 as Qwen3-VL's preprocessor_config.json has them, each image repeated to
temporal_patch_size frames, patches in merge-window order), camera-major, oldest frame first (the releases'
image_frames (cameras, frames, 3, H, W) flattened). Resized first into the release's pixel budget (`pixel_budget`:
config.json's min_pixels and max_pixels, 163840 and 196608 in both releases; the authors' code builds its
processor with them): transformers' smart_resize picks the size (multiples of patch_size x spatial_merge_size, the
aspect ratio kept), PIL bicubic resizes, as transformers' PIL processor (Qwen2VLImageProcessorPil) does, whose
output these rows equal (test_alpamayo_images). The authors' default processor is the torchvision one, whose
bicubic may differ in the last levels; an image already at its size is not resized by either. A release whose
config names no budget takes images as they are (multiples of patch x merge). Until 4 frames came, the oldest is
repeated (counted in `padded`).
Ego history: 16 poses 0.1 s apart ending at the frame's stamp (the releases': 1.6 s at 10 Hz), in the t0 ego frame.
Prompt: [system ids] then per image <|vision_start|> <|image_pad|> x tokens <|vision_end|>, then
<|traj_history_start|> 48 x <|traj_history|> <|traj_history_end|> (45 without the origin pad), with guidance a route
span <|route_start|> [route ids] <|route_end|>, then [user ids] and <|cot_start|> (not for Alpamayo 2 Super, whose
prompt ends where the assistant's turn opens; a release with a tokenizer: the route
span holds the live route's text, whenever a turn is ahead). The text ids come from
`prompt_ids.json` beside the release's config.json ({"system": [...], "user": [...], "route": [...]}) for a
release without a tokenizer (without the file the text parts are empty); a release with one gets the prompt its
authors' code builds, from that tokenizer (release_prompt.py).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...errors import ConfigError, InputError, expect
from ...types import Pose2D
from ...model.plugins.alpamayo.reference import AlpamayoInputs

FRAMES_PER_CAMERA = 4   # cameras: the release's (AlpamayoConfig.cameras: 4, Alpamayo 2 Super 6)
HISTORY_POSES, HISTORY_STEP_NS = 16, 100_000_000
IMAGE_MEAN = IMAGE_STD = 0.5
PROMPT_FILE = "prompt_ids.json"


@dataclass(frozen=True)
class PromptText:
    system: tuple[int, ...] = ()
    user: tuple[int, ...] = ()
    route: tuple[int, ...] = ()

    def can_route(self, config) -> bool:
        """Whether a frame's prompt can carry a route span: route ids given and the release's route tokens."""
        return bool(self.route) and "route_start" in config.special_ids

    def route_for(self, config, route_text: str | None, guidance: bool) -> bool:
        """Hand-made ids hold one fixed route: a frame carries it with guidance only (no live route text)."""
        return guidance

    def ids(self, config, image_tokens: list[int], route: bool | str, frames: int) -> torch.Tensor:
        expect(not isinstance(route, str), ConfigError,
               f"route text {route!r}: a prompt of hand-made ids ({PROMPT_FILE}) cannot tokenize text; give the "
               f"release its tokenizer")
        return prompt_ids(config, image_tokens, self, route)

    @classmethod
    def from_release(cls, directory) -> "PromptText":
        path = Path(directory) / PROMPT_FILE if directory is not None else None
        if path is None or not path.is_file():
            return cls()
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"'{path}': not a readable JSON file ({exc})") from None
        expect(isinstance(data, dict), ConfigError, f"'{path}': expected an object of token id lists")
        parts = {}
        for key in ("system", "user", "route"):
            ids = data.get(key, [])
            expect(isinstance(ids, list) and all(isinstance(i, int) and i >= 0 for i in ids), ConfigError,
                   f"'{path}': '{key}' must be a list of token ids >= 0")
            parts[key] = tuple(ids)
        return cls(**parts)


def pixel_budget(config) -> tuple[int, int] | None:
    """(min_pixels, max_pixels) each image is resized into (module docstring), or None: config.json names
    neither. ConfigError when it names one only, or an empty range."""
    low, high = config.raw.get("min_pixels"), config.raw.get("max_pixels")
    if low is None and high is None:
        return None
    expect(type(low) is int and type(high) is int and 0 < low <= high, ConfigError,
           f"config.json: min_pixels {low!r}, max_pixels {high!r}: expected both, 0 < min_pixels <= max_pixels "
           f"(the releases': 163840 and 196608)")
    return low, high


def fit_budget(image: np.ndarray, factor: int, budget: tuple[int, int] | None) -> np.ndarray:
    """(H, W, 3) uint8 -> resized into the budget at multiples of `factor` (module docstring); as it is when it
    fits or there is no budget."""
    if budget is None:
        return image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize
    height, width = image.shape[:2]
    try:
        size = smart_resize(height, width, factor, *budget)
    except (ValueError, ZeroDivisionError) as exc:   # an aspect ratio above 200, an empty side
        raise InputError(f"Alpamayo camera image {width} x {height}: {exc}") from None
    if size == (height, width):
        return image
    from PIL import Image
    return np.asarray(Image.fromarray(image).resize((size[1], size[0]), Image.Resampling.BICUBIC))


def patchify(image: np.ndarray, vision, budget: tuple[int, int] | None = None) -> tuple[torch.Tensor, list[int]]:
    """(H, W, 3) uint8 RGB -> resized into the budget (fit_budget), its patch rows (P, 3 * temporal_patch *
    patch^2) fp32 and grid [1, H/ps, W/ps]."""
    expect(isinstance(image, np.ndarray) and image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8
           and min(image.shape[:2]) > 0, InputError,
           f"Alpamayo camera image: expected (H, W, 3) uint8, got {getattr(image, 'shape', None)}")
    ps, merge, tps = vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size
    image = fit_budget(image, ps * merge, budget)
    height, width = image.shape[:2]
    side = ps * merge
    expect(height % side == 0 and width % side == 0 and height > 0 and width > 0, InputError,
           f"Alpamayo camera image {width} x {height}: each side must be a multiple of {side} px (patch {ps} x "
           f"merge {merge}); the release's config.json names no pixel budget to resize into")
    pixels = (image.astype(np.float32) / 255.0 - IMAGE_MEAN) / IMAGE_STD                   # (H, W, 3)
    chw = np.repeat(pixels.transpose(2, 0, 1)[None], tps, axis=0)                           # (tps, 3, H, W)
    gh, gw = height // ps, width // ps
    rows = chw.reshape(1, tps, 3, gh // merge, merge, ps, gw // merge, merge, ps)
    rows = rows.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(gh * gw, 3 * tps * ps * ps)    # (P, C*tps*ps*ps)
    return torch.from_numpy(np.ascontiguousarray(rows)), [1, gh, gw]


def prompt_ids(config, image_tokens: list[int], text: PromptText, route: bool) -> torch.Tensor:
    """The prompt's ids (1, S) for images of these token counts (layout: the module's docstring)."""
    vlm, special, traj = config.vlm, config.special_ids, config.traj_token_ids
    expect(not route or "route_start" in special, ConfigError,
           f"guidance: the {config.release} config has no route tokens (add_special_tokens is off)")
    ids = list(text.system)
    for count in image_tokens:
        ids += [vlm.vision_start_token_id] + [vlm.image_token_id] * count + [vlm.vision_end_token_id]
    ids += [traj["history_start"]] + [traj["history"]] * config.history_tokens + [traj["history_end"]]
    if route:
        ids += [special["route_start"], *text.route, special["route_end"]]
    ids += list(text.user)
    if config.opens_reasoning:
        ids.append(special["cot_start"])
    return torch.tensor([ids], dtype=torch.long)


def ego_history(poses: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, 3) map-frame x, y, yaw, oldest first, the last at the frame's stamp -> xyz (1, 1, T, 3) and rotations
    (1, 1, T, 3, 3) in the t0 ego frame (z = 0)."""
    poses = np.asarray(poses, dtype=np.float64)
    now = Pose2D(*poses[-1])
    xyz = np.stack([*now.to_ego(poses[:, 0], poses[:, 1]), np.zeros(len(poses))], -1)       # (T, 3)
    yaw = poses[:, 2] - now.yaw
    rot = np.zeros((len(poses), 3, 3))
    rot[:, 0, 0], rot[:, 0, 1], rot[:, 1, 0], rot[:, 1, 1] = np.cos(yaw), -np.sin(yaw), np.sin(yaw), np.cos(yaw)
    rot[:, 2, 2] = 1.0
    return (torch.from_numpy(xyz).float().view(1, 1, -1, 3), torch.from_numpy(rot).float().view(1, 1, -1, 3, 3))


def still_history() -> np.ndarray:
    """No odometry: standing at the origin for the whole history (T, 3)."""
    return np.zeros((HISTORY_POSES, 3))


def history_poses(history, stamp_ns: int, skew_ns: int, wait_s: float = 0.0) -> np.ndarray | None:
    """The 16 poses 0.1 s apart ending at stamp_ns from a StampedHistory of Pose2D (interpolated within the
    skew; the newest waited for up to wait_s) -> (16, 3) x, y, yaw, or None when one is missing."""
    if not history.match(stamp_ns, skew_ns, wait_s)[1]:   # the newest first: it may still be on its way
        return None
    rows = []
    for k in range(HISTORY_POSES - 1, -1, -1):
        pose, matched = history.match(stamp_ns - k * HISTORY_STEP_NS, skew_ns)
        if not matched:
            return None
        rows.append((pose.x, pose.y, pose.yaw))
    return np.array(rows)


def frame_inputs(model, images: list[np.ndarray], poses: np.ndarray, text: PromptText,
                 route: bool | str = False) -> AlpamayoInputs:
    """Images camera-major (cameras x frames, oldest first), the history's poses (T, 3) -> the model's inputs.
    text: PromptText (ids given) or release_prompt.ReleasePrompt (the release's tokenizer). route: False (no route
    span), True (PromptText's fixed route ids) or the route text (ReleasePrompt: "Turn left in 11m")."""
    vision, budget = model.config.vlm.vision_config, pixel_budget(model.config)
    return inputs_from_rows(model, [patchify(image, vision, budget) for image in images], poses, text, route)


def inputs_from_rows(model, patches: list[tuple[torch.Tensor, list[int]]], poses: np.ndarray, text: PromptText,
                     route: bool | str = False, keys: tuple | None = None) -> AlpamayoInputs:
    """frame_inputs from each image's patchify output (rows (P, C*tps*ps*ps), grid), camera-major. keys: one per
    image, unique to it (the node's: camera, stamp, message), so the split's prefix encodes each image once (engine/expert_split/vision_cache.py)."""
    rows, grids = zip(*patches)
    merged = model.config.vlm.vision_config.spatial_merge_size ** 2
    tokens = [g[1] * g[2] // merged for g in grids]
    xyz, rot = ego_history(poses)
    return AlpamayoInputs(text.ids(model.config, tokens, route, FRAMES_PER_CAMERA), torch.cat(rows),
                          torch.tensor(grids, dtype=torch.long), xyz, rot, keys)


class ImageRows:
    """Each camera image's patch rows made once (decoded, resized, patchified), kept by the object they came from
    (a camera message) while a window still reads it: a window makes only its new images' rows, 4 of 16 for the
    releases' 4 cameras x 4 frames. Rows are a function of their image alone, so reuse is exact."""

    def __init__(self):
        self.made: dict[int, tuple] = {}      # id(source) -> (source, (rows, grid)): the source kept, its id unique

    def rows(self, sources: list, make) -> list[tuple[torch.Tensor, list[int]]]:
        """make(index, source) -> (rows, grid) for a source not seen before; sources no longer listed are let go."""
        out = []
        for index, source in enumerate(sources):
            if id(source) not in self.made:
                self.made[id(source)] = (source, make(index, source))
            out.append(self.made[id(source)][1])
        listed = {id(source) for source in sources}
        self.made = {key: value for key, value in self.made.items() if key in listed}
        return out


class ImageHistory:
    """The last `frames` camera sets; `add` -> the images camera-major, oldest first, and how many of the
    frames are repeats of the oldest (fewer than `frames` came since the start)."""

    def __init__(self, frames: int = FRAMES_PER_CAMERA):
        self.sets: deque = deque(maxlen=frames)

    def add(self, images: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
        self.sets.append(list(images))
        padded = self.sets.maxlen - len(self.sets)
        sets = [self.sets[0]] * padded + list(self.sets)
        return [s[camera] for camera in range(len(images)) for s in sets], padded

    def clear(self) -> None:
        self.sets.clear()
