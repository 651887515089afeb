"""Options and helpers that several command areas share."""

from __future__ import annotations

import argparse
import json


def add_model_args(parser: argparse.ArgumentParser, default_preset: str | None = "tiny") -> None:
    from ..model.presets import PRESETS
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--preset", default=None, help=f"named preset, one of {sorted(PRESETS)} (default {default_preset})")
    group.add_argument("--checkpoint", default=None,
                       help="local Hugging Face model directory (config.json, safetensors, action_head.safetensors)")
    parser.add_argument("--fresh-head", action="store_true",
                        help="with --checkpoint: a directory without action_head.safetensors gets a freshly initialised head")
    parser.set_defaults(default_preset=default_preset)


def add_placement_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix-device", default="auto", help="auto (cuda if available), cuda, or cpu")
    parser.add_argument("--dtype", default="fp32", help="prefix dtype: fp32, bf16, fp16")
    parser.add_argument("--suffix-dtype", default=None,
                        help="CPU suffix dtype: fp32, bf16, fp16, int8 (the blocks' linears; engine/int8.py), or "
                             "auto (the fastest by a probe on the suffix's cores: bf16 only where native, int8 only "
                             "with a calibration within bounds); default: same as --dtype")


def model_from_args(args, shapes_only: bool = False, dtype=None, lazy: bool | None = None):
    """dtype None: a real-size preset stays lazy (each stage draws its side in its own dtype: model/seeded.py);
    the rest is built (read) whole in fp32. dtype given: everything, in that dtype. lazy=True: a checkpoint too
    (commands whose stages read their own sides: bench, profile; a graph mode's nodes load their own copy, and
    a whole model held here as well would not fit beside them at real size)."""
    import torch
    from ..model.load import load_vla
    from ..model.presets import get_preset
    preset = args.preset if args.preset or args.checkpoint else args.default_preset
    if lazy is None or dtype is not None:
        lazy = dtype is None and preset is not None and get_preset(preset).real_size
    return load_vla(preset=preset, checkpoint=args.checkpoint, shapes_only=shapes_only, lazy=lazy,
                    dtype=dtype or torch.float32, fresh_head=getattr(args, "fresh_head", False))


def placement_from_args(args, model):
    import sys
    from ..engine.cpu import default_stage_cores
    from ..engine.dtype_choice import Int8Gate, choose_suffix_dtype
    from ..engine.placement import Placement
    suffix_dtype = args.suffix_dtype or args.dtype
    if suffix_dtype == "auto":
        choice = choose_suffix_dtype(model.spec.hidden_size, model.spec.intermediate_size, default_stage_cores(1),
                                     int8=Int8Gate.of(model))
        print(f"suffix dtype auto: {choice.reason}", file=sys.stderr)
        suffix_dtype = choice.dtype
    return Placement.create(args.prefix_device, args.dtype, suffix_dtype)


def emit(result: dict, as_json: bool, text_lines) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        for line in text_lines(result):
            print(line)


def refuse_unless_default(parser_defaults: dict, args, options: list[str], why: str) -> None:
    """Options given that do not apply to the chosen mode are refused, not silently ignored."""
    from ..errors import ConfigError
    given = [f"--{o.replace('_', '-')}" for o in options if getattr(args, o) != parser_defaults[o]]
    if given:
        raise ConfigError(f"{', '.join(given)} do(es) not apply {why}")
