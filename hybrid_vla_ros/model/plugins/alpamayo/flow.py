"""The releases' flow-matching sampler (alpamayo_r1/diffusion/flow_matching.py `_euler`; 1.5 adds classifier-free
guidance, alpamayo1_5/diffusion/flow_matching.py `_guided_v`): x starts as seeded Gaussian noise (times a noise
temperature, 1 by default) at t = 0 and moves by N Euler steps of the predicted velocity to the actions at t = 1.
With guidance, v = (1 - w) v_unguided + w v_guided (Guided Flows, eq. 6); w = 1 is no guidance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ....errors import ConfigError, expect

Velocity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]   # x (B, N, C), t (B, 1, 1) -> (B, N, C)


@dataclass(frozen=True)
class FlowSettings:
    steps: int = 10                 # num_inference_steps
    guidance_weight: float = 1.0    # inference_guidance_weight (1.5); 1.0 = the guided velocity alone
    noise_temperature: float = 1.0  # 1.5's `temperature` of the initial noise

    @classmethod
    def from_config(cls, flow: dict) -> "FlowSettings":
        return cls(steps=int(flow.get("num_inference_steps", 10)),
                   guidance_weight=float(flow.get("inference_guidance_weight", 1.0)))

    def check(self) -> None:
        expect(self.steps >= 1, ConfigError, f"flow matching: steps={self.steps}, expected >= 1")
        expect(self.noise_temperature > 0, ConfigError,
               f"flow matching: noise temperature {self.noise_temperature}, expected > 0")


def mix(velocity: torch.Tensor, unguided: torch.Tensor | None, weight: float) -> torch.Tensor:
    """The velocity the sampler follows (B, N, C): the guided one, or (1 - w) v_unguided + w v_guided."""
    if unguided is None:
        return velocity
    return (1.0 - weight) * unguided + weight * velocity


def guided(velocity: Velocity, unguided: Velocity | None, weight: float) -> Velocity:
    """`mix` as a velocity function of (x, t)."""
    if unguided is None:
        return velocity
    return lambda x, t: mix(velocity(x, t), unguided(x, t), weight)


def initial_noise(shape: tuple[int, ...], settings: FlowSettings, generator: torch.Generator,
                  dtype=torch.float32) -> torch.Tensor:
    """x at t = 0 (B, N, C): Gaussian noise drawn on the CPU from `generator` (reproducible across devices)."""
    settings.check()
    x = torch.randn(shape, generator=generator, dtype=torch.float32) * settings.noise_temperature
    return x.to(dtype)


def euler_times(settings: FlowSettings) -> torch.Tensor:
    return torch.linspace(0.0, 1.0, settings.steps + 1)                                   # (steps+1,)


def step_time(times: torch.Tensor, i: int, batch: int, dtype) -> torch.Tensor:
    return times[i].expand(batch, 1, 1).to(dtype)                                          # (B, 1, 1)


def euler_step(x: torch.Tensor, times: torch.Tensor, i: int, velocity: torch.Tensor, dtype) -> torch.Tensor:
    """x_{i+1} = x_i + (t_{i+1} - t_i) v; `dtype` is the expert's (x itself turns fp32 after the first step)."""
    return x + (times[i + 1] - times[i]).to(dtype) * velocity


def sample(velocity: Velocity, shape: tuple[int, ...], settings: FlowSettings, generator: torch.Generator,
           unguided: Velocity | None = None, dtype=torch.float32) -> torch.Tensor:
    """-> x at t = 1, shape `shape` (B, N, C), after settings.steps Euler steps from `initial_noise`."""
    step = guided(velocity, unguided, settings.guidance_weight)
    x = initial_noise(shape, settings, generator, dtype)
    times = euler_times(settings)
    for i in range(settings.steps):
        x = euler_step(x, times, i, step(x, step_time(times, i, shape[0], dtype)), dtype)
    return x
