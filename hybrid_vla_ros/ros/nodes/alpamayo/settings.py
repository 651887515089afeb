"""The prefix node's parameters -> what an Alpamayo frame runs by, checked at configure (a ConfigError saying what
and why). decode.* as for action-token models (engine/decode/policy.py DecodePolicy checks them): temperature,
top_p, seed (each frame's sampler seed is drawn from it and the frame's stamp) and max_tokens (0 = the release's
256); decode.sample must be true (the releases sample their reasoning; there is no greedy path to equal), and
decode.vocabulary / decode.stop_ids are the release's own (every id but the trajectory tokens, stopped at
<|traj_future_start|>), not read. flow.steps (0 = the release's) and flow.guidance_weight (1.0 = no guidance;
else Alpamayo 1.5's classifier-free guidance)."""

from __future__ import annotations

from dataclasses import dataclass

from ....engine.decode.policy import DecodePolicy
from ....errors import ConfigError, expect
from ....model.plugins.alpamayo.decode import Sampling
from ....model.plugins.alpamayo.flow import FlowSettings

RELEASED_MAX_TOKENS = 256


@dataclass(frozen=True)
class StageSettings:
    sampling: Sampling
    flow: FlowSettings
    guidance: bool
    seed: int


def stage_settings(params, model) -> StageSettings:
    policy = DecodePolicy.from_params(params)
    expect(policy.sample, ConfigError,
           f"decode.sample=false: an {model.config.release} release samples its reasoning (as released: "
           f"temperature 0.6, top_p 0.98); set decode.sample true")
    sampling = Sampling(policy.temperature, policy.top_p, policy.max_tokens or RELEASED_MAX_TOKENS)
    released = FlowSettings.from_config(model.config.flow)
    weight = float(params["flow.guidance_weight"])
    flow = FlowSettings(params["flow.steps"] or released.steps, weight)
    guidance = weight != 1.0
    expect(not guidance or "route_start" in model.config.special_ids, ConfigError,
           f"flow.guidance_weight={weight:g}: guidance needs the route tokens, which the {model.config.release} "
           f"config lacks (add_special_tokens is off); set 1.0")
    return StageSettings(sampling, flow, guidance, policy.seed)
