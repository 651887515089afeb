"""`hybrid-vla plan`: which cut for my car. Predicts, for every partition p, prefix / transfer / suffix time,
period, latency and GPU / CPU bytes, the best p under a GPU memory budget and its dynamic zone, and native
GPU-only; for this machine (measured) or described hardware; --paper checks it against the paper's table."""

from __future__ import annotations

from ..report import progress_printer, write_report
from .common import add_model_args, model_from_args


def _dtype(name: str):
    """A side's arithmetic: a torch dtype, or INT8 (the CPU suffix's int8 linears: --suffix-dtype int8)."""
    from ..engine.placement import INT8, parse_dtype
    return INT8 if name == INT8 else parse_dtype(name, "dtype")


def cmd_plan(args) -> int:
    from ..plan.machine import Calibration
    from ..plan.text import paper_lines, plan_lines
    calibration = Calibration(args.calibration)
    progress = progress_printer("plan")
    chunks = _chunks(args.chunks)
    if args.fit:
        report = _fit(args, calibration, progress)
        from ..plan.fit import fit_lines
        lines = fit_lines(report)
    elif args.paper:
        from ..errors import ConfigError
        if chunks != [1]:
            raise ConfigError("--chunks: the paper comparison is unchunked; give --preset (or a checkpoint) instead")
        from ..plan.run import paper_report
        tokens = {k: v for k, v in (("orion", args.tokens), ("minddrive", args.tokens)) if v} if args.tokens else None
        report = paper_report(calibration, tokens, progress)
        lines = paper_lines(report)
    else:
        report = _plan_model(args, calibration, progress, chunks)
        lines = plan_lines(report, args.every)
    calibration.save()
    write_report(report, args.json)
    print("\n".join(lines))
    if args.json:
        print(f"full report: {args.json}")
    return 0


def _chunks(text: str) -> list:
    """'1,2,4,camera' -> [1, 2, 4, 'camera'] (each checked by engine/chunking.py parse_chunks)."""
    from ..engine.chunking import parse_chunks
    return [parse_chunks(item) for item in text.split(",") if item.strip()]


def _plan_model(args, calibration, progress, chunks) -> dict:
    import torch
    from ..engine.placement import Placement
    from ..errors import ConfigError
    from ..plan.hardware import PARTS_GPU, parse_cpu, parse_gpu
    from ..plan.run import plan_described, plan_here
    _lengths(args)
    model = model_from_args(args)
    budget = int(args.gpu_budget_gb * 2**30) if args.gpu_budget_gb else None
    gpu_dtype, cpu_dtype = _dtype(args.dtype), _dtype(args.suffix_dtype or args.dtype)
    if args.gpu in ("this", "none"):
        if args.cpu != "this":
            raise ConfigError("--cpu: a described CPU needs a described GPU (--gpu PART or a description); "
                              "with --gpu this|none both sides are this machine's, measured")
        device = "cpu" if args.gpu == "none" or not torch.cuda.is_available() else "cuda"
        placement = Placement.create(device, args.dtype, args.suffix_dtype or args.dtype)
        return _decode_heavy(args, model, plan_here(model, placement, budget, args.tokens, calibration, progress,
                                                    chunks))
    gpu = parse_gpu(args.gpu)
    key = args.gpu.lower() if args.gpu.lower() in PARTS_GPU else "described"
    cpu = None if args.cpu == "this" else parse_cpu(args.cpu)
    result = plan_described(model, gpu, key, cpu, gpu_dtype, cpu_dtype, budget, args.tokens, calibration,
                            progress=progress, chunks=chunks)
    return _decode_heavy(args, model, result)


def _fit(args, calibration, progress) -> dict:
    """--fit: each GPU part (with its budget) beside --cpu, the cuts that fit and the best of them per length."""
    from ..errors import ConfigError
    from ..plan.decode_heavy import is_decode_heavy
    from ..plan.fit import fit_report, parse_fit
    from ..plan.hardware import parse_cpu
    clashing = [flag for flag, given in (("--paper", args.paper), ("--gpu", args.gpu != "this"),
                                         ("--gpu-budget-gb", bool(args.gpu_budget_gb)), ("--chunks", args.chunks != "1"))
                if given]
    if clashing:
        raise ConfigError(f"--fit names each GPU and its budget itself (e.g. l20,h200:64); drop {', '.join(clashing)}")
    gpus, lengths = parse_fit(args.fit), _lengths(args)
    model = model_from_args(args)
    if not is_decode_heavy(model):
        raise ConfigError(f"--fit: {model.spec.name} is not a decode-heavy preset (alpamayo-r1-like, "
                          f"alpamayo2-super-like); for another model give --gpu PART --gpu-budget-gb GIB")
    cpu = None if args.cpu == "this" else parse_cpu(args.cpu)
    return fit_report(model, gpus, cpu, _dtype(args.dtype), _dtype(args.suffix_dtype or args.dtype), lengths,
                      args.flow_steps, args.guidance, calibration, progress, not args.no_encode_once)


def _lengths(args) -> list[int]:
    """--reasoning-tokens '0,32,128' -> [0, 32, 128], checked before any timing."""
    from ..errors import ConfigError
    try:
        lengths = [int(n) for n in args.reasoning_tokens.split(",") if n.strip()]
    except ValueError as exc:
        raise ConfigError(f"--reasoning-tokens '{args.reasoning_tokens}': expected e.g. 0,32,128,256,512") from exc
    if not lengths or min(lengths) < 0 or args.flow_steps < 1:
        raise ConfigError("--reasoning-tokens: lengths >= 0; --flow-steps: at least 1")
    return lengths


def _decode_heavy(args, model, result: dict) -> dict:
    """A decode-heavy model (alpamayo-r1-like): per-phase costs and the split's gain over reasoning lengths."""
    from ..plan.decode_heavy import decode_heavy_section, is_decode_heavy
    if not is_decode_heavy(model):
        return result
    return {**result, "decode_heavy": decode_heavy_section(model, result, _lengths(args), args.flow_steps,
                                                           args.guidance, encode_once=not args.no_encode_once)}


def register(sub) -> None:
    from ..plan.hardware import PARTS_CPU, PARTS_GPU
    p = sub.add_parser("plan", help="which cut for my car: predicted period, latency and GPU/CPU bytes for every "
                                    "partition p, the best p and zone, native GPU-only; --paper: vs the paper")
    add_model_args(p, default_preset="bench")
    p.add_argument("--paper", action="store_true",
                   help="ORION and MindDrive on the paper's NVIDIA L20 + Xeon Platinum 8470Q, beside its table")
    p.add_argument("--gpu", default="this",
                   help=f"this (CUDA when present, else the stand-in core set), none (the stand-in), a part "
                        f"{sorted(PARTS_GPU)}, or fp32=TFLOPS,bf16=TFLOPS,bw=GB/s,mem=GB,link=GB/s")
    p.add_argument("--cpu", default="this",
                   help=f"this (measured), a part {sorted(PARTS_CPU)}, or cores=N,isa=avx2|avx512|avx512_bf16|amx,"
                        f"ghz=F,bw=GB/s")
    p.add_argument("--dtype", default="fp32", help="prefix (GPU) dtype: fp32, bf16, fp16")
    p.add_argument("--suffix-dtype", default=None, help="CPU suffix dtype (default: --dtype)")
    p.add_argument("--tokens", type=int, default=None, help="tokens per pass (default: the model's prompt length)")
    p.add_argument("--gpu-budget-gb", type=float, default=0.0,
                   help="GPU memory the VLA may hold, GiB (what Autoware leaves); 0: no budget")
    p.add_argument("--calibration", default=None,
                   help="JSON file of block timings: read if it exists (no re-timing), written with new ones")
    p.add_argument("--chunks", default="1",
                   help="chunked prefill across the cut: comma-separated chunkings to predict at the best cut, "
                        "each 1..64 or 'camera' (one chunk per camera), e.g. 1,2,4,camera; 1: unchunked only")
    p.add_argument("--reasoning-tokens", default="0,32,128,256,512",
                   help="decode-heavy presets (alpamayo-r1-like): reasoning lengths to predict, comma-separated")
    p.add_argument("--flow-steps", type=int, default=10, help="decode-heavy presets: the expert's Euler steps")
    p.add_argument("--guidance", action="store_true",
                   help="decode-heavy presets: Alpamayo 1.5's classifier-free guidance (second cache, expert on both)")
    p.add_argument("--no-encode-once", action="store_true",
                   help="decode-heavy presets: every window's images through the vision tower (default: each image "
                        "once, the newest frame per camera a window, as the prefix runs where exact)")
    p.add_argument("--fit", default=None,
                   help="decode-heavy presets: GPU parts, each with an optional budget in GiB after ':' (e.g. "
                        "rtx4090,rtx5090,l20,h200:64): the cuts whose GPU side fits (KV cache included), the best "
                        "per reasoning length, native where it fits")
    p.add_argument("--every", type=int, default=1, help="print every N-th cut (the best, 0 and L always)")
    p.add_argument("--json", default=None, help="write the full plan (every cut, every assumption) here")
    p.set_defaults(func=cmd_plan)
