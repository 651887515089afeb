"""Actions -> trajectory: the unicycle model with acceleration and curvature controls of the releases
(alpamayo_r1/action_space/unicycle_accel_curvature.py `action_to_traj`, utils.py). Actions (N, 2) are
normalised (accel, curvature); the speed at t0 comes from the ego history by a smoothed least-squares fit; x, y
by trapezoidal integration from the origin (the t0 ego frame)."""

from __future__ import annotations

import torch
from torch import nn

DEFAULTS = dict(accel_mean=0.0, accel_std=1.0, curvature_mean=0.0, curvature_std=1.0, dt=0.1, n_waypoints=64,
                v_lambda=1e-6, v_ridge=1e-4)


class UnicycleActionSpace(nn.Module):
    """Normalisation statistics are buffers (saved as `action_space.*`, as the released module's are)."""

    def __init__(self, config: dict):
        super().__init__()
        fields = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}}
        for name in ("accel_mean", "accel_std", "curvature_mean", "curvature_std"):
            self.register_buffer(name, torch.tensor(float(fields[name])))
        self.dt, self.n_waypoints = float(fields["dt"]), int(fields["n_waypoints"])
        self.v_lambda, self.v_ridge = float(fields["v_lambda"]), float(fields["v_ridge"])

    @property
    def dims(self) -> tuple[int, int]:
        return self.n_waypoints, 2

    def to_trajectory(self, action: torch.Tensor, hist_xyz: torch.Tensor, hist_rot: torch.Tensor):
        """action (B, N, 2), history (B, T, 3) and (B, T, 3, 3) -> xyz (B, N, 3), rotation (B, N, 3, 3)."""
        accel = action[..., 0].float() * self.accel_std + self.accel_mean                   # (B, N)
        kappa = action[..., 1].float() * self.curvature_std + self.curvature_mean           # (B, N)
        v0 = initial_speed(hist_xyz.float(), hist_rot.float(), self.dt, self.v_lambda, self.v_ridge)   # (B,)
        speed, theta = integrate_speed_heading(accel, kappa, v0, self.dt)                   # (B, N+1) each
        xy = integrate_xy(speed, theta, self.dt)                                             # (B, N, 2)
        z = hist_xyz[..., -1:, 2].float().expand(-1, xy.shape[1])                           # (B, N)
        xyz = torch.cat([xy, z.unsqueeze(-1)], dim=-1)                                      # (B, N, 3)
        return xyz, yaw_matrices(theta[..., 1:])


def integrate_speed_heading(accel, kappa, v0, dt: float):
    """v_{k+1} = v_k + a_k dt; theta_{k+1} = theta_k + kappa_k (v_k dt + a_k dt^2 / 2); theta_0 = 0."""
    speed = torch.cat([v0[:, None], v0[:, None] + torch.cumsum(accel * dt, dim=-1)], dim=-1)     # (B, N+1)
    turn = kappa * speed[..., :-1] * dt + kappa * accel * (0.5 * dt * dt)                          # (B, N)
    theta = torch.cat([torch.zeros_like(v0)[:, None], torch.cumsum(turn, dim=-1)], dim=-1)         # (B, N+1)
    return speed, theta


def integrate_xy(speed, theta, dt: float) -> torch.Tensor:
    """Trapezoid of v (cos theta, sin theta) from the origin -> (B, N, 2)."""
    half = 0.5 * dt
    x = torch.cumsum(speed[..., :-1] * torch.cos(theta[..., :-1]) * half + speed[..., 1:] * torch.cos(theta[..., 1:])
                     * half, dim=-1)
    y = torch.cumsum(speed[..., :-1] * torch.sin(theta[..., :-1]) * half + speed[..., 1:] * torch.sin(theta[..., 1:])
                     * half, dim=-1)
    return torch.stack([x, y], dim=-1)


def yaw_matrices(theta: torch.Tensor) -> torch.Tensor:
    """(..., N) yaw -> (..., N, 3, 3) rotations about z."""
    c, s = torch.cos(theta), torch.sin(theta)
    zero, one = torch.zeros_like(c), torch.ones_like(c)
    rows = [torch.stack([c, -s, zero], -1), torch.stack([s, c, zero], -1), torch.stack([zero, zero, one], -1)]
    return torch.stack(rows, dim=-2)


def unwrapped_yaw(rot: torch.Tensor) -> torch.Tensor:
    """(..., T, 3, 3) -> (..., T) yaw, unwrapped so steps lie in (-pi, pi]."""
    yaw = torch.atan2(rot[..., 1, 0], rot[..., 0, 0])
    step = torch.diff(yaw, dim=-1)
    step = torch.atan2(torch.sin(step), torch.cos(step))
    return torch.cat([yaw[..., :1], yaw[..., :1] + torch.cumsum(step, dim=-1)], dim=-1)


def third_difference(n: int, like: torch.Tensor) -> torch.Tensor:
    """(n-3, n) rows [-1, 3, -3, 1]."""
    d = torch.zeros(max(n - 3, 0), n, dtype=like.dtype, device=like.device)
    rows = torch.arange(max(n - 3, 0))
    for offset, value in enumerate((-1.0, 3.0, -3.0, 1.0)):
        d[rows, rows + offset] = value
    return d


def initial_speed(hist_xyz, hist_rot, dt: float, lam: float, ridge: float) -> torch.Tensor:
    """The speed at the last history pose: v_0 .. v_T fitted to dp_k = dt/2 (v_k u_k + v_{k+1} u_{k+1}), with a
    third-order smoothness term lam / dt^6 and a ridge (utils.py dxy_theta_to_v_without_v0). -> (B,)"""
    dxy = hist_xyz[..., 1:, :2] - hist_xyz[..., :-1, :2]                                  # (B, M, 2)
    theta = unwrapped_yaw(hist_rot)                                                        # (B, M+1)
    b, m = dxy.shape[0], dxy.shape[1]
    design = hist_xyz.new_zeros(b, 2 * m, m + 1)                                           # (B, 2M, M+1)
    rows, cols = torch.arange(m), torch.arange(m)
    for channel, fn in enumerate((torch.cos, torch.sin)):
        design[:, 2 * rows + channel, cols] = fn(theta[:, :-1])
        design[:, 2 * rows + channel, cols + 1] = fn(theta[:, 1:])
    target = (2.0 / dt * dxy).flatten(-2)                                                  # (B, 2M)
    d3 = third_difference(m + 1, hist_xyz)
    lhs = design.transpose(1, 2) @ design + (lam / dt ** 6) * (d3.T @ d3) \
        + ridge * torch.eye(m + 1, dtype=hist_xyz.dtype)                                   # (B, M+1, M+1)
    rhs = design.transpose(1, 2) @ target.unsqueeze(-1)                                    # (B, M+1, 1)
    return torch.linalg.solve(lhs, rhs).squeeze(-1)[:, -1]
