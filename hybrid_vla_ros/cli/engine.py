"""Engine commands (no ROS): verify, info, run (serial stream), export."""

from __future__ import annotations

import statistics
import time

from .. import stop
from .common import add_model_args, add_placement_args, emit, model_from_args, placement_from_args


def cmd_verify(args) -> int:
    from ..engine.verify import verify_partitions
    from .common import model_kind
    refuse_real_size(args)
    if model_kind(args) == "alpamayo":   # a release directory or an Alpamayo preset: run_split vs run_reference
        return verify_alpamayo(args)
    if model_kind(args) == "tokens":     # ActionFlow's packed split vs sequential decoding
        return verify_tokens(args)
    model = model_from_args(args)
    result = verify_partitions(model, placement_from_args(args, model), frames=args.frames)
    emit(result, args.json, lambda r: [f"{r['preset']} ({r['family']}, {r['num_blocks']} blocks, {r['dtype']})"] +
         [f"  p={x['partition']:3d}  max_abs_diff={x['max_abs_diff']:.3e}" for x in r["results"]])
    return 0 if result["max_abs_diff"] <= args.tolerance else 1


def refuse_real_size(args) -> None:
    """verify runs the whole model unsplit beside every cut: a real-size preset (weights drawn per stage on
    demand, model/seeded.py) would need all of them at once, in fp32."""
    from ..errors import ConfigError
    from ..model.presets import ALPAMAYO_PRESETS, get_preset
    if args.preset is None or args.preset in ALPAMAYO_PRESETS or not get_preset(args.preset).real_size:
        return
    raise ConfigError(f"preset '{args.preset}' is real size: verify runs the unsplit model beside every cut, so it "
                      f"would draw every weight at once; verify a unit-test-size model of the same code path "
                      f"(--preset tiny-qwen3vl for Qwen3-VL, tiny-alpamayo-r1 / tiny-alpamayo-1.5 for an Alpamayo "
                      f"release's split, or the tiny preset of its family) or a --checkpoint; its shapes: "
                      f"`hybrid-vla info --preset {args.preset}`")


def verify_alpamayo(args) -> int:
    """Both sides in one dtype, fp32 or bf16 (--dtype), against the unsplit model in that dtype (read once)."""
    import torch
    from ..engine.expert_split.verify import report_lines, verify_split
    from ..errors import ConfigError
    given = [f"{flag} {value}" for flag, value, default in (("--prefix-device", args.prefix_device, ("auto", "cpu")),
             ("--dtype", args.dtype, ("fp32", "bf16")), ("--suffix-dtype", args.suffix_dtype, (None, args.dtype)))
             if value not in default]
    if given:
        raise ConfigError(f"{', '.join(given)}: an Alpamayo model is verified on the CPU, both sides in this process "
                          f"and in one dtype, --dtype fp32 or bf16 (engine/expert_split); leave the others out")
    model = model_from_args(args, dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype])
    result = verify_split(model, frames=args.frames)
    emit(result, args.json, report_lines)
    return 0 if result["max_abs_diff"] <= args.tolerance else 1


def verify_tokens(args) -> int:
    """An action-token model: both sides on the CPU in fp32, in this process (engine/actionflow/verify.py)."""
    from ..engine.actionflow.verify import verify_token_partitions
    from .common import refuse_placement_for_tokens
    refuse_placement_for_tokens(args, "verified")
    result = verify_token_partitions(model_from_args(args), frames=args.frames)
    emit(result, args.json, lambda r: [f"{r['preset']} ({r['family']}, {r['num_blocks']} blocks, {r['dtype']}, "
                                       f"{r['answer']}, pack {r['pack']})"] +
         [f"  p={x['partition']:3d}  max_abs_diff={x['max_abs_diff']:.3e}"
          + (f"  other tokens in frames {x['frames_with_other_tokens']}" if x["frames_with_other_tokens"] else "")
          for x in r["results"]])
    return 0 if result["max_abs_diff"] <= args.tolerance else 1


def _info_lines(r: dict) -> list[str]:
    gib = 1024 ** 3
    return [
        f"{r['preset']} ({r['family']}), {r['num_blocks']} blocks, partition {r['partition']}, {r['dtype']}",
        f"  prefix: {r['prefix_blocks']} blocks + vision + embeddings  {r['prefix_params']:,} params  {r['prefix_bytes'] / gib:.3f} GiB",
        f"  suffix: {r['suffix_blocks']} blocks + norm + head          {r['suffix_params']:,} params  {r['suffix_bytes'] / gib:.3f} GiB",
        f"  total:  {r['total_params']:,} params  {r['total_bytes'] / gib:.3f} GiB",
        f"  dynamic zone {r['zone']}: {r['zone_bytes'] / gib:.3f} GiB resident on both sides -> prefix device holds "
        f"{r['prefix_resident_bytes'] / gib:.3f} GiB, CPU {r['suffix_resident_bytes'] / gib:.3f} GiB",
        f"  boundary: {r['boundary_tokens']} tokens, {r['boundary_bytes'] / 2**20:.2f} MiB per frame"
        + (f" (of which DeepStack additions still due: {r['deepstack_bytes'] / 2**20:.2f} MiB)"
           if r["deepstack_bytes"] else "")]


def cmd_info(args) -> int:
    from ..engine.placement import parse_dtype
    from ..engine.stages import check_partition, partition_report
    model = model_from_args(args, shapes_only=True)
    model = model.to(parse_dtype(args.dtype or ("fp16" if model.spec.real_size else "fp32")))
    partition = check_partition(args.partition if args.partition is not None else model.num_blocks // 2,
                                model.num_blocks, "--partition")
    zone = tuple(int(x) for x in args.zone.split(",")) if args.zone else None
    emit(partition_report(model, partition, zone), args.json, _info_lines)
    return 0


def cmd_run(args) -> int:
    if args.config or args.graph:  # the old spelling of `hybrid-vla graph`
        from .graph import run_graph
        return run_graph(args, refuse=["preset", "checkpoint", "partition", "frames", "threads", "prefix_device",
                                       "dtype", "suffix_dtype"], defaults=RUN_DEFAULTS)
    expect_engine_only(args)
    return run_serial(args)


def expect_engine_only(args) -> None:
    from ..errors import ConfigError
    if args.processes:
        raise ConfigError("--processes applies to the ROS graph only (hybrid-vla graph --processes)")


def run_serial(args) -> int:
    import torch
    from ..engine.stages import PrefixStage, SuffixStage, check_partition
    from ..model.inputs import synthetic_frame
    model = model_from_args(args)
    placement = placement_from_args(args, model)
    partition = check_partition(args.partition if args.partition is not None else model.num_blocks // 2,
                                model.num_blocks, "--partition")
    prefix, suffix = PrefixStage(model, partition, placement), SuffixStage(model, partition, placement)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# {model.spec.name}: {model.num_blocks} blocks, partition {partition}, {placement.describe()}")
    totals = []
    for seq in range(args.frames):
        stop.check()
        t0 = time.perf_counter()
        state = prefix.run(synthetic_frame(model.spec, seq))
        traj = suffix.run(state)
        totals.append((time.perf_counter() - t0) * 1e3)
        last = traj.waypoints[-1]
        print(f"frame {seq:4d}  prefix {state.timings['prefix_ms']:8.2f} ms  suffix {state.timings['suffix_ms']:8.2f} ms  "
              f"total {totals[-1]:8.2f} ms  last waypoint x={last.x:+.3f} y={last.y:+.3f} t={last.time_from_start:.1f}s")
    print(f"# median total {statistics.median(totals):.2f} ms over {len(totals)} frames")
    return 0


def cmd_export(args) -> int:
    from ..engine.placement import parse_dtype
    from ..model.checkpoint import save_checkpoint
    from ..model.presets import get_preset
    real_size = bool(args.preset) and get_preset(args.preset).real_size
    model = model_from_args(args, dtype=parse_dtype(args.dtype or ("bf16" if real_size else "fp32")))
    path = save_checkpoint(model, args.out, max_shard_size=args.max_shard_size)
    print(f"wrote checkpoint of '{model.spec.name}' to {path}")
    return 0


RUN_DEFAULTS: dict = {}


def register(sub) -> None:
    p = sub.add_parser("verify", help="split vs unsplit output for every partition point")
    add_model_args(p); add_placement_args(p)
    p.add_argument("--frames", type=int, default=2)
    p.add_argument("--tolerance", type=float, default=1e-6, help="exit 1 if any difference exceeds this")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("info", help="blocks, parameters and bytes on each side of a partition")
    add_model_args(p)
    p.add_argument("--partition", type=int, default=None)
    p.add_argument("--dtype", default=None, help="dtype to size the weights in (default fp16 for shape-only presets)")
    p.add_argument("--zone", default=None, help="dynamic zone 'lo,hi': report the memory its residency costs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("run", help="stream synthetic frames through prefix then suffix (serial); "
                                   "--graph/--config: same as `hybrid-vla graph`")
    add_model_args(p); add_placement_args(p)
    p.add_argument("--partition", type=int, default=None)
    p.add_argument("--frames", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--config", default=None, help="alias of `hybrid-vla graph --config FILE`")
    p.add_argument("--graph", action="store_true", help="alias of `hybrid-vla graph`")
    p.add_argument("--processes", action="store_true", help="with --graph/--config: one process per node")
    p.set_defaults(func=cmd_run)
    RUN_DEFAULTS.update(vars(p.parse_args([])))

    p = sub.add_parser("export", help="write a model as a Hugging Face directory (config.json, safetensors "
                                      "shards + index, action_head.safetensors)")
    add_model_args(p)
    p.add_argument("--out", required=True)
    p.add_argument("--max-shard-size", default="2GB", help="as transformers' save_pretrained, e.g. 50MB")
    p.add_argument("--dtype", default=None, help="weights' dtype: fp32, bf16, fp16 (default bf16 for real-size "
                                                 "presets, fp32 otherwise)")
    p.set_defaults(func=cmd_export)
