"""An Alpamayo release's prompt built from its own tokenizer, as the authors' inference code builds it (ROS-free).

Read from NVlabs/alpamayo @ 1cba38c (src/alpamayo_r1/helper.py, test_inference.py) and NVlabs/alpamayo1.5 @
f42e594 (src/alpamayo1_5/helper.py, nav_utils.py): one chat, rendered by Qwen3-VL's chat template with
`continue_final_message` (so it ends right after <|cot_start|>), then tokenized:

    <|im_start|>system\\n{SYSTEM}<|im_end|>\\n<|im_start|>user\\n
    per image, camera-major, oldest frame first (1.5 only: "{camera name}: " before a camera's first frame and
        "frame {i} " before each): <|vision_start|><|image_pad|><|vision_end|>
    <|traj_history_start|> 48 x <|traj_history|> <|traj_history_end|>
    1.5 with a route: <|route_start|>{route text, e.g. "Turn right in 30m"}<|route_end|>
    {INSTRUCTION}<|im_end|>\\n<|im_start|>assistant\\n<|cot_start|>

The chat template's rendering is Qwen3-VL's (its template, not read from a release: the authors' code loads it
from Qwen/Qwen3-VL-2B-Instruct). The whole text is tokenized at once (byte-level BPE joins text across a label and
the next, so pieces tokenized apart would give other ids), then each <|image_pad|> is expanded to its image's
token count, as the processor does. The released cameras are indices 0, 1, 2, 6 in that order."""

from __future__ import annotations

from pathlib import Path

import torch

from ...errors import ConfigError, expect

SYSTEM = "You are a driving assistant that generates safe and accurate actions."
INSTRUCTION = "output the chain-of-thought reasoning of the driving process, then output the future trajectory."
CAMERA_NAMES = {0: "Front left camera", 1: "Front camera", 2: "Front right camera", 3: "Rear left camera",
                4: "Rear camera", 5: "Rear right camera", 6: "Front telephoto camera"}
RELEASED_CAMERAS = (0, 1, 2, 6)
IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
HISTORY = "<|traj_history_start|>" + "<|traj_history|>" * 48 + "<|traj_history_end|>"


def prompt_text(model_type: str, frames: int, route_text: str | None = None,
                cameras: tuple[int, ...] = RELEASED_CAMERAS) -> str:
    """The rendered chat (module docstring) for `frames` frames of each camera."""
    labelled = model_type == "alpamayo1_5"
    parts = [f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"]
    for camera in cameras:
        for frame in range(frames):
            if labelled:
                parts.append((f"{CAMERA_NAMES[camera]}: " if frame == 0 else "") + f"frame {frame} ")
            parts.append(IMAGE)
    parts.append(HISTORY)
    if route_text is not None:
        parts.append(f"<|route_start|>{route_text}<|route_end|>")
    parts.append(f"{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n<|cot_start|>")
    return "".join(parts)


class ReleasePrompt:
    """frame_inputs' prompt from the release's tokenizer (model/plugins/alpamayo/release.py release_tokenizer); the
    route text comes per frame (route/text.py release_route_text, from the live LaneletRoute)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @staticmethod
    def can_route(config) -> bool:
        """Whether a frame's prompt can carry a route span: Alpamayo 1.5 with its route tokens (R1's tokenizer has
        them too, but its authors' create_message takes no navigation)."""
        return config.model_type == "alpamayo1_5" and "route_start" in config.special_ids

    def route_for(self, config, route_text: str | None, guidance: bool) -> bool | str:
        """The `route` a frame's ids take: its route text where the release has route tokens and the frame has a
        turn ahead (with or without guidance: the authors' prompt carries the route whenever it is known), else
        False (no route span; a guided frame then runs unguided)."""
        return route_text if route_text and self.can_route(config) else False

    def ids(self, config, image_tokens: list[int], route: bool | str, frames: int) -> torch.Tensor:
        """-> (1, S) for images of these token counts, camera-major. route: the route text, or False (none)."""
        expect(route is False or isinstance(route, str) and route, ConfigError,
               "the release's prompt takes a route as text (route/text.py release_route_text), not the hand-made "
               "ids of prompt_ids.json")
        count = len(image_tokens) // frames
        expect(len(image_tokens) % frames == 0 and 0 < count <= len(RELEASED_CAMERAS), ConfigError,
               f"{len(image_tokens)} images: the release's prompt takes {frames} frames of each of up to "
               f"{len(RELEASED_CAMERAS)} cameras")
        cameras = RELEASED_CAMERAS[:count]   # the released order: front left, front, front right, front tele
        text = prompt_text(config.model_type, frames, route or None, cameras)
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        pad, counts, out = config.vlm.image_token_id, iter(image_tokens), []
        for token in ids:
            out += [token] * next(counts) if token == pad else [token]
        return torch.tensor([out], dtype=torch.long)


def release_prompt(model):
    """The prompt a release's frames get: built from its tokenizer as the authors' code builds it (ReleasePrompt)
    where the release or its backbone's folder has one; else the ids of a hand-made `prompt_ids.json` beside its
    config.json (frame_inputs.PromptText; none: the text parts empty)."""
    from ...model.plugins.alpamayo.release import release_tokenizer
    from .frame_inputs import PROMPT_FILE, PromptText
    directory = model.checkpoint_directory
    if model.config.model_type == "alpamayo2_super":   # its prompt from its tokenizer is not built: the ids given
        expect(directory is not None and (Path(directory) / PROMPT_FILE).is_file(), ConfigError,
               f"'{directory}': Alpamayo 2 Super's prompt from its tokenizer is not built here (its chat template and "
               f"its per-image camera and frame labels not checked against its code); put the prompt text's ids in "
               f"{PROMPT_FILE} beside its config.json (docs/ALPAMAYO.md section 7)")
        return PromptText.from_release(directory)
    tokenizer = release_tokenizer(model.config, directory) if directory is not None else None
    return ReleasePrompt(tokenizer) if tokenizer is not None else PromptText.from_release(directory)
