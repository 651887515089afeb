"""Camera image (any size, uint8 RGB) -> model pixels, the way the family's HF image processor does it, on
the prefix's device.

The model's input size is fixed (the spec's image_height x image_width: a fixed token count per camera keeps
every frame's sequence length, and the pipeline's buffers, the same). So:
- Qwen2-VL / Qwen2.5-VL (Qwen2VLImageProcessor): bicubic resize straight to the input size. Its
  `smart_resize` picks that very size when the camera's aspect ratio matches the input's; for another aspect
  ratio it would change the token count per frame, which a fixed-shape pipeline cannot take, so the image is
  stretched to the input's aspect instead (choose image_height/width with your cameras' aspect ratio).
- LLaVA (CLIPImageProcessor): bicubic resize of the shortest edge to the input size, then a centre crop.
Then rescale (x 1/255) and normalise with the processor's mean/std.

The resampling is torch's antialiased bicubic (a = -0.5, PIL's kernel) in separable passes rounded to uint8
levels as PIL's are; PIL computes in fixed point, so a few values in 1,000 differ by one level (1/255/std ~
0.015 after normalisation; test_preprocess.py measures it against transformers' own processors).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ConfigError, InputError, expect
from .families import get_family
from .spec import VLASpec

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI CLIP, used by Qwen2-VL and LLaVA processors
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class ImageProcessing:
    height: int                      # the model's input size
    width: int
    crop: bool                       # shortest edge -> input size, then centre crop (CLIP); else straight resize
    mean: tuple[float, float, float] = CLIP_MEAN
    std: tuple[float, float, float] = CLIP_STD
    rescale: float = 1.0 / 255.0

    @classmethod
    def for_spec(cls, spec: VLASpec, processor_config: dict | None = None, source: str = "") -> "ImageProcessing":
        """The family's defaults; a checkpoint's preprocessor_config.json may set mean, std, rescale, crop."""
        cfg = processor_config or {}
        values = dict(height=spec.image_height, width=spec.image_width,
                      crop=bool(cfg.get("do_center_crop", get_family(spec.family).centre_crop)))
        for ours, theirs in (("mean", "image_mean"), ("std", "image_std")):
            if theirs in cfg:
                value = cfg[theirs]
                expect(isinstance(value, list) and len(value) == 3 and all(isinstance(v, (int, float)) for v in value),
                       ConfigError, f"{source}: {theirs}={value!r}, expected three numbers")
                values[ours] = tuple(float(v) for v in value)
        if "rescale_factor" in cfg:
            values["rescale"] = float(cfg["rescale_factor"])
        expect(all(s > 0 for s in values.get("std", CLIP_STD)), ConfigError, f"{source}: image_std must be positive")
        return cls(**values)

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        """The size an (height, width) image is resampled to before any crop."""
        if not self.crop:
            return self.height, self.width
        short, long = min(height, width), max(height, width)
        edge = max(self.height, self.width)   # CLIP's shortest_edge (the crop is square for LLaVA)
        new_long = int(edge * long / short)    # as transformers' get_resize_output_image_size
        return (edge, new_long) if height <= width else (new_long, edge)


def check_camera_image(image, where: str) -> None:
    expect(isinstance(image, np.ndarray), InputError,
           f"{where}: image is {type(image).__name__}, expected a numpy array (H, W, 3) uint8")
    expect(image.ndim == 3 and image.shape[2] == 3 and image.shape[0] > 0 and image.shape[1] > 0, InputError,
           f"{where}: image shape {image.shape}, expected (H, W, 3)")
    expect(image.dtype == np.uint8, InputError, f"{where}: image dtype {image.dtype}, expected uint8")


def resample_uint8(raw: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(N, 3, h, w) uint8 -> (N, 3, H, W) float32 in [0, 255]: torch's uint8 kernel (CPU only), separable
    passes rounded to uint8 like PIL's; 14x faster than going through float for 6 x 1920x1080 here."""
    return F.interpolate(raw, size=size, mode="bicubic", align_corners=False, antialias=True).float()


def resample_float(raw: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The same on any device (CUDA has no uint8 antialiased bicubic): width then height in float, rounded
    and clipped to uint8 levels between the passes as PIL does (one float pass differs from PIL by up to 6
    levels where the bicubic overshoot is clipped between its passes)."""
    batch, h = raw.float(), raw.shape[-2]
    for step in ((h, size[1]), size):
        if tuple(batch.shape[-2:]) != step:
            batch = F.interpolate(batch, size=step, mode="bicubic", align_corners=False, antialias=True)
            batch = batch.round_().clamp_(0.0, 255.0)
    return batch


def _resample(raw: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    if tuple(raw.shape[-2:]) == size:
        return raw.float()
    return (resample_uint8 if raw.device.type == "cpu" else resample_float)(raw, size)


def _centre_crop(batch: torch.Tensor, height: int, width: int) -> torch.Tensor:
    h, w = batch.shape[-2:]
    top, left = (h - height) // 2, (w - width) // 2
    return batch[..., top:top + height, left:left + width]


def preprocess(images: list[np.ndarray], proc: ImageProcessing, device: torch.device | str = "cpu",
               where: str = "frame") -> torch.Tensor:
    """Camera images (each (h, w, 3) uint8, any size) -> (N, 3, H, W) float32 on `device`, normalised. The
    uint8 data crosses to the device (a quarter of float's bytes); resampling and normalising happen there.
    Cameras of one size are processed as one batch."""
    for i, image in enumerate(images):
        check_camera_image(image, f"{where} camera {i}")
    mean = torch.tensor(proc.mean, device=device).view(1, 3, 1, 1)
    std = torch.tensor(proc.std, device=device).view(1, 3, 1, 1)
    out: list[torch.Tensor | None] = [None] * len(images)
    for shape in dict.fromkeys(image.shape for image in images):          # each distinct camera size once
        picks = [i for i, image in enumerate(images) if image.shape == shape]
        raw = torch.from_numpy(np.stack([images[i] for i in picks])).to(device, non_blocking=True)  # (n, h, w, 3)
        batch = _resample(raw.permute(0, 3, 1, 2), proc.resized_size(shape[0], shape[1]))  # (n, 3, h', w') float
        if proc.crop:
            batch = _centre_crop(batch, proc.height, proc.width)            # (n, 3, H, W)
        pixels = (batch * proc.rescale - mean) / std
        for row, i in enumerate(picks):
            out[i] = pixels[row]
    return torch.stack(out)                                                 # (N, 3, H, W)
