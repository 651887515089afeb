"""Frame -> model inputs (token ids, pixel tensors); images go through model/preprocess.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..context import CameraGeometry, FrameContext, invert, pose_matrix, sample_rig
from ..types import NAV_COMMANDS, EgoState, Frame, Navigation
from ..errors import InputError, expect
from .preprocess import preprocess
from .spec import VLASpec
from .tokenize.tokens import MAX_DELAY_S, delay_text


@dataclass
class EncodedFrame:
    input_ids: torch.Tensor          # (P, S) int64: one row per pass (P = 1 but for several-pass models)
    mm_token_type_ids: torch.Tensor  # (P, S) int32, 1 on image tokens
    pixels: dict                     # family-specific pixel tensors (see model/families/)
    ego: torch.Tensor                # (2,) speed m/s, yaw rate rad/s (a scene encoder's input)


def encode_frame(frame: Frame, model, device: torch.device | str = "cpu") -> EncodedFrame:
    """Frame (camera images of any size) -> token ids and the family's pixel tensors; the images are
    resized and normalised on `device` (the prefix's), ids stay on the CPU."""
    spec, where = model.spec, f"frame {frame.seq}"
    ego = frame.ego or EgoState()
    for name in ("speed_mps", "yaw_rate_rps"):
        value = getattr(ego, name)
        expect(isinstance(value, (int, float)) and math.isfinite(value), InputError,
               f"{where}: ego {name}={value!r}, expected a finite number")
    delay = frame.expected_delay_s
    expect(isinstance(delay, (int, float)) and 0.0 <= delay <= MAX_DELAY_S, InputError,
           f"{where}: expected_delay_s={delay!r}, expected 0..{MAX_DELAY_S} s")
    expect(len(frame.images) == spec.image_slots, InputError,
           f"{where}: {len(frame.images)} camera images, model '{spec.name}' expects {spec.image_slots}"
           + (f" ({spec.num_cameras} cameras x {spec.frames_per_camera} frames)" if spec.frames_per_camera > 1 else ""))
    images = preprocess(frame.images, model.image_processing, device, where)       # (N, 3, H, W) float32
    blocks, per_block = model.family.image_blocks(spec)
    prompts = [model.prompt.build(blocks, per_block, instruction, spec.text_tokens, float(ego.speed_mps),
                                  float(ego.yaw_rate_rps), spec.query_tokens, spec.slot_tokens)
               for instruction in model.instructions(delay_text(delay) if spec.delay_aware else frame.instruction)]
    input_ids, mm_types = torch.cat([ids for ids, _ in prompts]), torch.cat([mm for _, mm in prompts])  # (P, S)
    return EncodedFrame(input_ids, mm_types, model.family.pixel_inputs(spec, images),
                        torch.tensor([float(ego.speed_mps), float(ego.yaw_rate_rps)]))


def synthetic_frame(spec: VLASpec, seq: int, stamp_ns: int | None = None, seed: int = 0) -> Frame:
    """The model's input for synthetic frame `seq`: synthetic_camera_frame's images, or for a model reading its
    history the window of them (each camera's frames seq - (K-1)s .. seq, frame 0 standing in before it; camera-major,
    as engine/pipeline/frame_window.py builds it from arriving frames)."""
    frame = synthetic_camera_frame(spec, seq, stamp_ns, seed)
    if spec.frames_per_camera == 1:
        return frame
    steps = spec.window_steps(seq)
    past = {s: frame.images if s == seq else synthetic_camera_frame(spec, s, seed=seed).images for s in set(steps)}
    frame.images = [past[s][camera] for camera in range(spec.num_cameras) for s in steps]
    frame.image_keys = tuple(("synthetic", seed, camera, s) for camera in range(spec.num_cameras) for s in steps)
    return frame


def synthetic_camera_frame(spec: VLASpec, seq: int, stamp_ns: int | None = None, seed: int = 0) -> Frame:
    """A deterministic synthetic camera set (one image a camera): smooth gradients plus noise, a slowly moving ego."""
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
    stamp_ns = stamp_ns if stamp_ns is not None else seq * 100_000_000
    context = synthetic_context(spec, seq, stamp_ns, ego) if spec.context else None
    return Frame(images=images, seq=seq, stamp_ns=stamp_ns, ego=ego, context=context)


def synthetic_context(spec: VLASpec, seq: int, stamp_ns: int, ego: EgoState, history_poses: int = 4) -> FrameContext:
    """A whole context for a synthetic frame (for a model that declares context pieces): sample_rig's cameras,
    the ego driving along x at its speed, `history_poses` poses 0.5 s apart, and a route command cycling through
    NAV_COMMANDS with the frame's seq (so a split run meets every command)."""
    cameras = []
    for frame_id, k, chain in sample_rig(spec.num_cameras, spec.image_width, spec.image_height):
        base_from_cam = chain[0][2] @ chain[1][2]
        cameras.append(CameraGeometry(frame_id, k, invert(base_from_cam), spec.image_width, spec.image_height))
    t = stamp_ns * 1e-9
    history_dt = 0.5 * np.arange(history_poses, 0, -1, dtype=np.float64)           # oldest first
    history = np.array([[ego.speed_mps * (t - dt), 0.3 * math.sin(t - dt), 0.0] for dt in history_dt]).reshape(-1, 3)
    command = NAV_COMMANDS[seq % len(NAV_COMMANDS)]
    navigation = Navigation(command, 20.0 + seq % 5, (60.0, 5.0 * (seq % 3 - 1)), (15.0, 1.0 * (seq % 3 - 1)), "route")
    return FrameContext(stamp_ns, cameras, pose_matrix(ego.speed_mps * t, 0.3 * math.sin(t), 0.0),
                        np.array([ego.speed_mps, 0.2, ego.yaw_rate_rps, 0.0]), np.array([True, True, True, False]),
                        history, np.ones(history_poses, dtype=bool), history_dt, navigation)
