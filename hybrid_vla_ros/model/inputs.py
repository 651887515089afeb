"""Frame -> model inputs (token ids, pixel tensors). Validates every image against the spec."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..types import EgoState, Frame
from ..errors import InputError, expect
from .families import CLIP_MEAN, CLIP_STD
from .spec import VLASpec
from .tokens import build_prompt


@dataclass
class EncodedFrame:
    input_ids: torch.Tensor          # (1, S) int64
    mm_token_type_ids: torch.Tensor  # (1, S) int32, 1 on image tokens
    pixels: dict                     # family-specific pixel tensors (see families.py)


def check_image(image, spec: VLASpec, where: str) -> None:
    expect(isinstance(image, np.ndarray), InputError,
           f"{where}: image is {type(image).__name__}, expected a numpy array (H, W, 3) uint8")
    expected = (spec.image_height, spec.image_width, 3)
    expect(image.ndim == 3 and image.shape[2] == 3, InputError,
           f"{where}: image shape {image.shape}, expected 3 channels (H, W, 3) = {expected}")
    expect(image.shape == expected, InputError,
           f"{where}: image size {image.shape[1]}x{image.shape[0]}, model '{spec.name}' expects "
           f"{spec.image_width}x{spec.image_height} (shape {expected})")
    expect(image.dtype == np.uint8, InputError, f"{where}: image dtype {image.dtype}, expected uint8")


def images_to_tensor(images: list[np.ndarray], spec: VLASpec, where: str) -> torch.Tensor:
    """list of (H, W, 3) uint8 -> (N, 3, H, W) float32, CLIP-normalised."""
    expect(len(images) == spec.num_cameras, InputError,
           f"{where}: {len(images)} camera images, model '{spec.name}' expects {spec.num_cameras}")
    for i, image in enumerate(images):
        check_image(image, spec, f"{where} camera {i}")
    batch = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float().div_(255.0)  # (N, 3, H, W)
    mean = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD).view(1, 3, 1, 1)
    return (batch - mean) / std


def encode_frame(frame: Frame, spec: VLASpec, family) -> EncodedFrame:
    where = f"frame {frame.seq}"
    ego = frame.ego or EgoState()
    for name in ("speed_mps", "yaw_rate_rps"):
        value = getattr(ego, name)
        expect(isinstance(value, (int, float)) and math.isfinite(value), InputError,
               f"{where}: ego {name}={value!r}, expected a finite number")
    images = images_to_tensor(frame.images, spec, where)
    input_ids, mm_types = build_prompt(spec.num_cameras, family.image_tokens_per_camera(spec), frame.instruction,
                                       spec.text_tokens, float(ego.speed_mps), float(ego.yaw_rate_rps))
    return EncodedFrame(input_ids, mm_types, family.pixel_inputs(spec, images))


def synthetic_frame(spec: VLASpec, seq: int, stamp_ns: int | None = None, seed: int = 0) -> Frame:
    """A deterministic synthetic frame: smooth gradients plus noise, a slowly moving ego."""
    rng = np.random.default_rng(seed * 100_003 + seq)
    h, w = spec.image_height, spec.image_width
    yy, xx = np.mgrid[0:h, 0:w]
    images = []
    for cam in range(spec.num_cameras):
        base = (xx * (cam + 1) + yy * 2 + seq * 7) % 256
        img = np.stack([base, (base + 85) % 256, (base + 170) % 256], axis=-1).astype(np.int16)
        img += rng.integers(-20, 20, size=img.shape, dtype=np.int16)
        images.append(np.clip(img, 0, 255).astype(np.uint8))
    ego = EgoState(speed_mps=8.0 + 0.1 * seq, yaw_rate_rps=0.01 * math.sin(seq / 5.0))
    return Frame(images=images, seq=seq, stamp_ns=stamp_ns if stamp_ns is not None else seq * 100_000_000, ego=ego)
