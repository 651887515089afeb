"""Options and helpers that several command areas share."""

from __future__ import annotations

import argparse
import json


def add_model_args(parser: argparse.ArgumentParser, default_preset: str | None = "tiny") -> None:
    from ..model.presets import ALPAMAYO_PRESETS, PRESETS
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--preset", default=None, help=f"named preset, one of {sorted(PRESETS)}, or an Alpamayo "
                       f"release's: {sorted(ALPAMAYO_PRESETS)} (default {default_preset})")
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
    from ..model.presets import ALPAMAYO_PRESETS, get_preset
    preset = args.preset if args.preset or args.checkpoint else args.default_preset
    if lazy is None or dtype is not None:
        lazy = dtype is None and preset not in (None, *ALPAMAYO_PRESETS) and get_preset(preset).real_size
    return load_vla(preset=preset, checkpoint=args.checkpoint, shapes_only=shapes_only, lazy=lazy,
                    dtype=dtype or torch.float32, fresh_head=getattr(args, "fresh_head", False))


def refuse_placement_for_tokens(args, what: str) -> None:
    """An action-token model's verify and bench run both sides on the CPU in fp32 (ActionFlow): a placement flag
    other than that is refused in one line rather than ignored."""
    from ..errors import ConfigError
    given = [f"{flag} {value}" for flag, value, default in (("--prefix-device", args.prefix_device, ("auto", "cpu")),
             ("--dtype", args.dtype, ("fp32",)), ("--suffix-dtype", args.suffix_dtype, (None, "fp32")))
             if value not in default]
    if given:
        raise ConfigError(f"{', '.join(given)}: an action-token model is {what} on the CPU in fp32 (ActionFlow's "
                          f"packed split against sequential decoding); leave them out")


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


# Models that only some commands serve: what they are, and what serves them (refuse_unserved).
WHAT = {"alpamayo": "is an Alpamayo release (a flow-matching expert over the VLM's per-layer cache)",
        "expert_shapes": "sizes an Alpamayo release: its expert head reads the VLM's per-layer keys/values, so it "
                         "runs only in a release's own model",
        "tokens": "decodes action tokens"}
SERVED_BY = {
    "alpamayo": "`hybrid-vla verify` (its split against the unsplit reference at every cut) and the ROS graph's prefix "
                "and suffix nodes (`hybrid-vla graph` with model.checkpoint a release directory or model.preset "
                "tiny-alpamayo-r1 / tiny-alpamayo-1.5); `hybrid-vla memory --checkpoint DIR` (each side of a "
                "release in its own process); "
                "`hybrid-vla bench` (native, serial and pipelined on the model; --preset alpamayo-bench: a reduced "
                "1.5); shapes: `hybrid-vla info --preset alpamayo-r1-like`",
    "expert_shapes": "`hybrid-vla info` and `plan` (its shapes, bytes and predicted costs); to run the split: "
                     "--preset tiny-alpamayo-r1 / tiny-alpamayo-1.5 or a release directory as --checkpoint; "
                     "`hybrid-vla bench --preset alpamayo-bench` times it on a reduced 1.5",
    "tokens": "`hybrid-vla verify`, `info`, `export`, `make-sample-drive`, `memory`, `bench` (native, serial, "
              "pipelined; --head action-tokens: ActionFlow's packs) and the ROS graph's packed nodes (`hybrid-vla "
              "graph` with model.preset)"}


def model_kind(args) -> str | None:
    """'alpamayo' (a release directory or an Alpamayo preset), 'expert_shapes' (a preset with the Alpamayo
    expert as its head), 'tokens' (an action-token preset or checkpoint), or None (any other model, or a
    command without one)."""
    from ..model.presets import ALPAMAYO_PRESETS, PRESETS
    if not hasattr(args, "preset"):
        return None
    if getattr(args, "checkpoint", None):
        from ..model.checkpoint_files import inspect_checkpoint
        from ..model.load import resolve_checkpoint
        from ..model.plugins.alpamayo.config import is_release
        directory = resolve_checkpoint(args.checkpoint)
        if is_release(directory):
            return "alpamayo"
        from ..model.plugins.onevl import is_release as is_onevl
        if is_onevl(directory):
            return "tokens"   # its plan written as text, decoded by ActionFlow's packed engine
        files = inspect_checkpoint(directory, getattr(args, "fresh_head", False))   # its head's metadata only
        return "tokens" if files.vla.get("action_head") in ("tokens", "text") else None
    preset = args.preset or getattr(args, "default_preset", None)
    if preset in ALPAMAYO_PRESETS:
        return "alpamayo"
    spec = PRESETS.get(preset)
    if spec is None:
        return None
    return "expert_shapes" if spec.head == "alpamayo_expert" else "tokens" if spec.action_head in ("tokens", "text") else None


def serves(args, kind: str) -> bool:
    if kind == "alpamayo":   # memory reads a release's files (a preset is built whole: it has none)
        return args.command in ("verify", "bench") or (args.command == "memory" and
                                                       bool(getattr(args, "checkpoint", None)))
    if kind == "expert_shapes":
        return args.command in ("info", "plan")
    return args.command in ("verify", "info", "export", "make-sample-drive", "memory") or (
        args.command == "bench" and (getattr(args, "scenario", "modes") == "modes" or
                                     getattr(args, "head", None) == "action-tokens"))


def refuse_unserved(args) -> None:
    """A model the command cannot serve: refused before the model loads (a checkpoint's config is read to tell its
    kind), in one line with what would serve it."""
    from ..errors import ConfigError
    kind = model_kind(args)
    if kind is not None and not serves(args, kind):
        name = getattr(args, "checkpoint", None) or args.preset or args.default_preset
        raise ConfigError(f"model '{name}' {WHAT[kind]}: `hybrid-vla {args.command}` does not serve it; served by "
                          f"{SERVED_BY[kind]}")


def save_report(report: dict, args, plot=None) -> None:
    """A command's report to --json FILE, and drawn by `plot` to --plot FILE where both are given."""
    from ..report import write_report
    write_report(report, args.json)
    if plot is not None and getattr(args, "plot", None):
        plot(report, args.plot)
