"""Training a small driving VLA on synthetic road drives (sim/road.py), on the CPU, from a fixed seed.

Data: frames of `drives` training drives (seeds from TRAIN_SEED_BASE on; evaluation uses seeds below it),
each frame = the cameras' images + the ego speed and yaw rate (the prompt's ego text) -> the ground-truth
waypoints of the next num_waypoints * dt seconds. The whole model learns (vision encoder, decoder, waypoint
head) with AdamW on a smooth L1 loss of the cumulated positions (metres) plus the speeds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from ..engine.pipeline.frame_window import FrameWindow
from ..engine.stages import frame_embeddings, run_blocks
from ..errors import ConfigError, expect
from ..model.vla import VLAModel
from ..sim.road import drive, ground_truth
from .delays import PATH_DT_S, delayed_batch, path_points
from ..types import EgoState, Frame

TRAIN_SEED_BASE = 1000   # training drives: seeds 1000, 1001, ...; held-out drives use seeds below 1000


@dataclass
class TrainConfig:
    steps: int = 9000
    batch: int = 16
    lr: float = 1e-3
    weight_decay: float = 0.01
    drives: int = 80
    frames_per_drive: int = 60
    rate_hz: float = 10.0
    seed: int = 0
    max_delay_s: float = 0.0   # > 0: a delay-aware model's delays are drawn in [0, max_delay_s] (learn/delays.py)


@dataclass
class Sample:
    frame: Frame
    truth: np.ndarray      # (N, 4): x, y, heading, speed
    lead_braking: bool = False   # a lead vehicle in view, slower than it was a frame before
    path: np.ndarray | None = None   # (M, 4) the ground truth every PATH_DT_S far enough for delayed targets


def road_samples(spec, seeds, frames_per_drive: int, rate_hz: float = 10.0,
                 max_delay_s: float = 0.0) -> list[Sample]:
    """Every frame of the drives of `seeds`, at the spec's camera count, image size and waypoint spacing; a model
    reading its history gets each frame's window of the drive's frames (engine/pipeline/frame_window.py); with
    max_delay_s, each sample's fine ground-truth path for delayed targets (learn/delays.py)."""
    out = []
    points = path_points(spec.num_waypoints * spec.waypoint_dt_s, max_delay_s)
    for seed in seeds:
        window, lead_before = FrameWindow(spec), None
        for f in drive(seed, frames_per_drive, spec.num_cameras, spec.image_height, spec.image_width,
                       spec.num_waypoints, spec.waypoint_dt_s, rate_hz):
            frame = Frame(images=f.images, seq=f.seq, stamp_ns=int(f.seq * 1e9 / rate_hz),
                          ego=EgoState(f.scene.speed_mps, f.yaw_rate_rps))
            lead = f.scene.lead_speed_mps if f.scene.lead_m is not None else None
            braking = lead is not None and lead_before is not None and lead < lead_before - 1e-6
            path = ground_truth(f.scene, points, PATH_DT_S) if max_delay_s else None
            out.append(Sample(window.push(frame), f.truth, braking, path))
            lead_before = lead
    return out


def batch_forward(model: VLAModel, frames: list[Frame]) -> torch.Tensor:
    """Frames -> the head's raw output (B, N, 4): steps dx, dy, heading, speed (differentiable)."""
    expect(model.family.deepstack_blocks(model.backbone.config) == 0 and model.scene_encoder is None, ConfigError,
           f"train: model '{model.spec.name}' has DeepStack or a scene encoder; training covers the single-pass "
           f"vision-tower families (qwen2_vl, qwen2_5_vl, llava, internvl) only")
    expect(not model.action_head.side_inputs and model.prompt_embeddings is None, ConfigError,
           f"train: model '{model.spec.name}''s head {model.spec.head!r} reads side inputs "
           f"{list(model.action_head.side_inputs)} or its prompt has learned rows; training covers heads reading "
           f"the query tokens alone (the shipped mlp, gru)")
    embedded = [frame_embeddings(model, f)[:2] for f in frames]
    hidden = torch.cat([e for e, _ in embedded])                                     # (B, S, H)
    positions = torch.cat([p for _, p in embedded], dim=embedded[0][1].dim() - 2)     # (3, B, S) or (B, S)
    mask = torch.ones(hidden.shape[:2], dtype=torch.long)
    decoder = model.decoder
    hidden = decoder.norm(run_blocks(decoder, decoder.layers, hidden, positions, mask))
    return model.action_head(hidden[:, -model.query_tokens:])                         # (B, N, 4), one pass each


def horizon_weights(n: int) -> torch.Tensor:
    """(n,) 2 / (k + 2) for waypoint k, scaled to mean 1: a far point's metres (a curve's tens) must not drown
    the near ones, which are what a tracking controller steers by."""
    w = 2.0 / (torch.arange(n, dtype=torch.float32) + 2.0)
    return w / w.mean()


def waypoint_loss(raw: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Smooth L1 of the cumulated positions (m), each waypoint weighted by horizon_weights, + 0.5 x that of the
    speeds (m/s) + 2 x that of the headings."""
    xy = raw[..., :2].cumsum(dim=1)                                                   # (B, N, 2)
    position = (F.smooth_l1_loss(xy, truth[..., :2], reduction="none") * horizon_weights(xy.shape[1])[:, None]).mean()
    return (position + 0.5 * F.smooth_l1_loss(raw[..., 3], truth[..., 3])
            + 2.0 * F.smooth_l1_loss(raw[..., 2], truth[..., 2]))


def warmup_cosine(steps: int, warmup_fraction: float = 0.1):
    """LR factor per step: linear warm-up over the first tenth, then cosine down to 0 (any steps >= 1)."""
    warmup = max(1, int(steps * warmup_fraction))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
    return factor


def train(model: VLAModel, config: TrainConfig, samples: list[Sample] | None = None, progress=None) -> list[dict]:
    """Trains `model` in place. -> history: one {step, loss, seconds} per step. progress(step, loss), if given,
    hears every step (the CLI draws a progress bar with it)."""
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    expect(not config.max_delay_s or model.spec.delay_aware, ConfigError,
           f"train: max_delay_s={config.max_delay_s} for model '{model.spec.name}', which is not delay_aware "
           f"(its prompt would not say the delay its targets assume)")
    samples = samples if samples is not None else road_samples(
        model.spec, range(TRAIN_SEED_BASE, TRAIN_SEED_BASE + config.drives), config.frames_per_drive, config.rate_hz,
        config.max_delay_s)
    delays = np.random.default_rng([config.seed, 1])   # the delays' own draws: the batches stay the recipe's
    truths = torch.tensor(np.stack([s.truth for s in samples]), dtype=torch.float32)  # (n, N, 4)
    model.train()
    model.requires_grad_(True)   # a loaded checkpoint comes frozen for inference: fine-tuning it learns all of it
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, warmup_cosine(config.steps))
    history, start = [], time.perf_counter()
    for step in range(config.steps):
        index = rng.choice(len(samples), size=min(config.batch, len(samples)), replace=False)
        if config.max_delay_s:
            frames, delayed = delayed_batch(samples, index, delays, config.max_delay_s, model.spec.num_waypoints,
                                            model.spec.waypoint_dt_s)
            loss = waypoint_loss(batch_forward(model, frames), torch.tensor(delayed, dtype=torch.float32))
        else:
            loss = waypoint_loss(batch_forward(model, [samples[i].frame for i in index]), truths[index])
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        schedule.step()
        history.append({"step": step, "loss": loss.item(), "seconds": time.perf_counter() - start})
        if progress:
            progress(step, history[-1]["loss"])
    model.eval()
    return history


def plot_loss(history: list[dict], config: TrainConfig, name: str, path) -> None:
    """The loss per step and its running mean, log scale."""
    from ..report import pyplot
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    steps, losses = [h["step"] for h in history], [h["loss"] for h in history]
    ax.plot(steps, losses, lw=0.6, alpha=0.5, label="per step")
    window = max(1, len(losses) // 50)
    ax.plot(steps[window - 1:], np.convolve(losses, np.ones(window) / window, mode="valid"), lw=1.5,
            label=f"mean of {window} steps")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (smooth L1, m)")
    ax.set_title(f"{name}: {config.drives} drives x {config.frames_per_drive} frames, batch {config.batch}, "
                 f"seed {config.seed}, {history[-1]['seconds'] / 60:.1f} min", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
