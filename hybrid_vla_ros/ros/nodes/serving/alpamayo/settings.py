"""The prefix node's parameters -> what an Alpamayo frame runs by, checked at configure (a ConfigError saying what
and why). decode.* as for action-token models (engine/decode/policy.py DecodePolicy checks them): temperature,
top_p, seed (each frame's sampler seed is drawn from it and the frame's stamp) and max_tokens (0 = the release's
256); decode.sample must be true (the releases sample their reasoning; there is no greedy path to equal), and
decode.vocabulary / decode.stop_ids are the release's own (every id but the trajectory tokens, stopped at
<|traj_future_start|>), not read. flow.steps (0 = the release's) and flow.guidance_weight (1.0 = no guidance;
else Alpamayo 1.5's classifier-free guidance)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .....engine.chunking import parse_chunks
from .....engine.decode.policy import DecodePolicy
from .....engine.dtype_choice import DtypeChoice, choose_suffix_dtype
from .....engine.int8 import int8_available
from .....errors import ConfigError, expect
from .....model.plugins.alpamayo.decode import Sampling
from .....model.plugins.alpamayo.flow import FlowSettings

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


def side_dtype(params, side: str, model, cores) -> DtypeChoice:
    """The dtype a release's side is read and run in: fp32 or bf16 on the CPU. The prefix's `dtype`; the suffix's
    `dtype`, where auto is engine/dtype_choice.py's probe on the release's block shapes (bf16 only where native
    and measured faster), or int8 on the suffix (its layers' linears: engine/expert_split/int8.py). Each side may
    differ: a side converts what arrives to its own dtype. The prefix may run on a GPU (`device`: prefix_device),
    there in fp32, bf16 or fp16. Refused with the reason: fp16 on the CPU (no native path), int8 on the prefix or
    where this torch has no int8 kernel, cuda where torch has none."""
    name = params["dtype"]
    if side == "prefix":
        device = prefix_device(params)   # ConfigError: cuda where there is none
        expect(name != "fp16" or device.type == "cuda", ConfigError,
               f"dtype=fp16: an Alpamayo prefix runs fp16 on a GPU only (device: cuda); on the CPU fp32 or bf16")
        if name == "fp16":
            return DtypeChoice(name, "set by the dtype parameter (a GPU prefix)")
    elif name == "auto":
        text = model.config.vlm.text_config
        return choose_suffix_dtype(text.hidden_size, text.intermediate_size, cores)
    elif name == "int8":
        missing = int8_available()
        expect(missing is None, ConfigError, f"dtype=int8: {missing}; set fp32 or bf16")
        return DtypeChoice("int8", "set by the dtype parameter: the suffix's layers' linears in int8, the rest fp32")
    expect(name in ("fp32", "bf16"), ConfigError,
           f"dtype={name}: an Alpamayo release's {side} runs fp32 or bf16 on the CPU (int8 too, on the suffix; "
           f"auto, on the suffix)")
    return DtypeChoice(name, "set by the dtype parameter")


def prefix_device(params) -> torch.device:
    """The prefix's `device`: cpu or cuda[:i] (refused where torch has no CUDA); auto is the CPU for a release, so
    that a machine with a GPU runs what was asked for rather than what it happens to have."""
    from .....engine.placement import resolve_prefix_device
    name = params["device"]
    return torch.device("cpu") if name == "auto" else resolve_prefix_device(name)


def refuse_unserved(params, side: str) -> None:
    """What the Alpamayo stages do not do in this version, refused at configure with the reason instead of being
    ignored: a chunked prompt, a warm standby (the frame lives in the active suffix's caches: a standby would
    need the prefix to send the frame again), NUMA binding of the suffix's worker (pin it with `cores`)."""
    expect(parse_chunks(params["chunks"]) == 1, ConfigError,
           f"chunks={params['chunks']!r}: an Alpamayo release's prompt crosses whole in this version; keep chunks: 1")
    if side == "suffix":
        expect(not params["warm_standby"], ConfigError,
               "warm_standby: an Alpamayo frame lives in the active suffix's caches (prompt, reasoning, expert), which "
               "a standby does not hold; not in this version: set false")
        expect(params["numa_node"] < 0, ConfigError,
               f"numa_node={params['numa_node']}: the Alpamayo suffix's worker is not NUMA-bound in this version; "
               f"set -1 and pin it with cores")
