"""Learning commands: train (a small driving VLA on synthetic road drives), eval (its driving quality),
calibrate (an int8 suffix's smoothing and measured deviation, from recorded frames)."""

from __future__ import annotations

import json
from pathlib import Path

from .common import add_model_args, model_from_args

DELAY_AWARE_MAX_S = 1.0   # a delay-aware model's training delays, 0..1 s: the paper's ORION plans are 0.6-0.84 s old


def cmd_train(args) -> int:
    from tqdm import tqdm
    from .. import stop
    from ..learn.train import TrainConfig, plot_loss, train
    from ..model.checkpoint import save_checkpoint
    given = {name: getattr(args, name) for name in ("steps", "batch", "lr", "drives", "frames_per_drive", "seed",
                                                    "max_delay_s")}
    model = model_from_args(args)
    if given["max_delay_s"] is None and model.spec.delay_aware:
        given["max_delay_s"] = DELAY_AWARE_MAX_S
    config = TrainConfig(**{name: value for name, value in given.items() if value is not None})  # else its defaults
    bar = tqdm(total=config.steps, desc="train", unit="step")

    def progress(step: int, loss: float) -> None:
        stop.check()  # Ctrl-C: stop cleanly (nothing written)
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")
    history = train(model, config, samples=training_samples(model, config, args.closed_loop_scenarios),
                    progress=progress)
    bar.close()
    out = Path(args.out)
    save_checkpoint(model, out)
    (out / "training.json").write_text(json.dumps({"config": {**vars(config), "closed_loop_scenarios":
                                                              args.closed_loop_scenarios,
                                                              "from_checkpoint": args.checkpoint},
                                                   "history": history}, indent=1))
    plot_loss(history, config, model.spec.name, args.plot or out / "loss.png")
    print(f"trained '{model.spec.name}' for {config.steps} steps (final loss {history[-1]['loss']:.3f}); "
          f"checkpoint in {out}, loss curve {args.plot or out / 'loss.png'}")
    return 0


def training_samples(model, config, closed_loop_scenarios: int):
    """The road drives' frames (None: train's own), plus with closed_loop_scenarios > 0 the frames of the model's
    own drives of that many training scenarios, labelled by the ground-truth driver (learn/closed_loop/dagger.py)."""
    if not closed_loop_scenarios:
        return None
    from ..errors import ConfigError, expect
    expect(not config.max_delay_s, ConfigError, "train: --closed-loop-scenarios with delays: the closed-loop frames "
                                                "carry no ground-truth path to read delayed targets from")
    from ..learn.closed_loop.dagger import closed_loop_samples
    from ..learn.train import TRAIN_SEED_BASE, road_samples
    road = road_samples(model.spec, range(TRAIN_SEED_BASE, TRAIN_SEED_BASE + config.drives), config.frames_per_drive,
                        config.rate_hz)
    driven = closed_loop_samples(model, closed_loop_scenarios, progress=lambda seed, end, n: print(
        f"closed-loop scenario {seed}: {end}, {n} frames", flush=True))
    print(f"training on {len(road)} road-drive frames + {len(driven)} closed-loop frames", flush=True)
    return road + driven


def cmd_eval(args) -> int:
    if args.closed_loop:
        from .closed_loop import run
        return run(args)
    from ..errors import ConfigError
    from ..learn.evaluate import evaluate, plot_evaluation
    from ..report import key_value_table, progress_printer, write_report
    model = model_from_args(args)
    try:
        partitions = tuple(int(p) for p in args.partitions.split(",") if p) if args.partitions else None
    except ValueError as exc:
        raise ConfigError(f"--partitions '{args.partitions}': expected comma-separated integers") from exc
    dtypes = tuple(d for d in args.suffix_dtypes.split(",") if d)
    report = evaluate(model, args.drives, args.seed, args.frames_per_drive, partitions, progress_printer("eval"),
                      prefix=(args.prefix_device, args.prefix_dtype), suffix_dtypes=dtypes, kv_stream=args.kv_stream,
                      kv_refresh_windows=args.kv_refresh_windows)
    write_report(report, args.json)
    if args.plot:
        plot_evaluation(report, args.plot)
    print(key_value_table([(name, f"ADE {v['ade_m']:.3f} m, FDE {v['fde_m']:.3f} m"
                            + (f" (lead braking: {v['lead_braking_ade_m']:.3f} / {v['lead_braking_fde_m']:.3f} m)"
                               if "lead_braking_ade_m" in v else "")
                            + (f", max diff vs native {v['max_diff_vs_native_m']:.2e} m" if "max_diff_vs_native_m" in v else "")
                            + (f", vs the full recompute: mean {v['vs_full_recompute']['mean_m']:.3f} m, p95 "
                               f"{v['vs_full_recompute']['p95_m']:.3f} m, max {v['vs_full_recompute']['max_m']:.3f} m"
                               if "vs_full_recompute" in v else ""))
                           for name, v in report["settings"].items()]
                          + [("ADE below constant velocity", f"{report['ade_reduction_vs_constant_velocity']:.1%}")]
                          + [(f"{d} suffix ADE change", f"{c:.3%}") for d, c in report["ade_change"].items()]
                          + [("full report", args.json or "(--json FILE)")]))
    return 0


def calibration_frames(args, model) -> tuple[list, str]:
    """The frames to calibrate on: a recorded drive (--bag), or the synthetic road's training drives (seeds from
    1000 on: evaluation's held-out drives stay unseen). -> (frames, their source in words)."""
    from ..errors import ConfigError, expect
    if args.bag:
        from ..engine.pipeline.frame_window import FrameWindow
        from ..ros.bags.frames import drive_frames
        frames, skipped = drive_frames(args.bag, model.spec.num_cameras, args.frames)
        window = FrameWindow(model.spec)   # a model reading its history: each frame's window of the drive
        frames = [window.push(frame) for frame in frames]
        expect(bool(frames), ConfigError, f"bag {args.bag}: no complete frame with odometry ({skipped})")
        return frames, f"bag {args.bag}: {len(frames)} frames (skipped {skipped})"
    from ..learn.train import TRAIN_SEED_BASE, road_samples
    seeds = list(range(TRAIN_SEED_BASE, TRAIN_SEED_BASE + args.drives))
    frames = [s.frame for s in road_samples(model.spec, seeds, args.frames_per_drive)][:args.frames]
    return frames, f"synthetic road training drives {seeds[0]}..{seeds[-1]}: {len(frames)} frames"


def cmd_calibrate(args) -> int:
    from ..errors import ConfigError, expect
    from ..learn.calibrate import calibrate
    from ..report import key_value_table, write_report
    expect(args.out or args.checkpoint, ConfigError, "calibrate: a preset has no directory: give --out DIR")
    model = model_from_args(args)
    expect(not model.spec.context, ConfigError,
           f"calibrate: model '{model.spec.name}' needs frame context {list(model.spec.context)}; calibrating it "
           f"from a bag's context is not built yet")
    frames, source = calibration_frames(args, model)
    calibration = calibrate(model, frames, source)
    out = Path(args.out) if args.out else model.checkpoint_files.directory
    path = calibration.save(out)
    report = {"preset": model.spec.name, "file": str(path), **calibration.describe()}
    write_report(report, args.json)
    print(key_value_table([("frames", source), ("int8 as run here", calibration.flavour),
                           ("mean / max deviation from fp32", f"{calibration.deviation_m:.4f} / "
                                                              f"{calibration.max_deviation_m:.4f} m"),
                           ("without smoothing", f"{calibration.unsmoothed_deviation_m:.4f} m"),
                           ("smoothing kept", "yes" if calibration.smoothing else "no (it did not help)"),
                           ("written", str(path))]))
    return 0


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="an int8 suffix's SmoothQuant smoothing and its measured trajectory "
                                         "deviation from fp32, from a recorded drive; written next to the checkpoint")
    add_model_args(p, default_preset="drive")
    p.add_argument("--bag", default=None, help="a recorded drive (rosbag2 folder) to calibrate on; default: the "
                                               "synthetic road's training drives")
    p.add_argument("--drives", type=int, default=4, help="without --bag: training drives (seeds 1000, 1001, ...)")
    p.add_argument("--frames-per-drive", type=int, default=20)
    p.add_argument("--frames", type=int, default=None, help="at most this many frames")
    p.add_argument("--out", default=None, help="directory to write int8_calibration.safetensors to "
                                               "(default: the checkpoint's)")
    p.add_argument("--json", default=None)
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("train", help="train a small driving VLA on synthetic road drives (CPU), save a checkpoint")
    add_model_args(p, default_preset="drive")
    p.add_argument("--out", required=True, help="checkpoint directory to write")
    # defaults (None here): learn/train.py TrainConfig, the settings of the shipped data/models/drive
    p.add_argument("--steps", type=int, default=None, help="optimiser steps (default 9000)")
    p.add_argument("--batch", type=int, default=None, help="frames per step (default 16)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-3)")
    p.add_argument("--drives", type=int, default=None, help="training drives, seeds 1000, 1001, ... (default 80)")
    p.add_argument("--frames-per-drive", type=int, default=None, help="(default 60)")
    p.add_argument("--seed", type=int, default=None, help="initialisation and batch order (default 0)")
    p.add_argument("--max-delay-s", type=float, default=None,
                   help="a delay-aware model (spec delay_aware, preset drive-delay): each sample's delay drawn in "
                        "0..this, its target the plan from the pose reached after it (default 1.0; 0 otherwise)")
    p.add_argument("--closed-loop-scenarios", type=int, default=0,
                   help="also train on the frames of the model's own closed-loop drives of this many training "
                        "scenarios (seeds 1000 ..), labelled by the ground-truth driver (DAgger; with --checkpoint: "
                        "the model that drives them) (default 0)")
    p.add_argument("--plot", default=None, help="loss curve PNG (default OUT/loss.png)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="ADE/FDE on held-out synthetic drives: constant velocity, native, the hybrid "
                                    "split at several p with the suffix in each --suffix-dtypes")
    add_model_args(p, default_preset="drive")
    p.add_argument("--drives", type=int, default=10)
    p.add_argument("--seed", type=int, default=0, help="first held-out drive seed (seeds below 1000)")
    p.add_argument("--frames-per-drive", type=int, default=40)
    p.add_argument("--partitions", default=None, help="comma-separated p (default: 1, L/2, L-1)")
    p.add_argument("--prefix-device", default="cpu",
                   help="the hybrid settings' prefix device: cpu (default; fp32 then equals native exactly), cuda, auto")
    p.add_argument("--prefix-dtype", default="fp32", help="the hybrid settings' prefix dtype: fp32, bf16, fp16")
    p.add_argument("--suffix-dtypes", default="fp32,bf16",
                   help="comma-separated CPU suffix dtypes scored at each p: fp32, bf16, fp16, int8 (the checkpoint's "
                        "int8 calibration applies where it has one) (default fp32,bf16)")
    p.add_argument("--kv-stream", action="store_true",
                   help="a model reading its history: also the split with streaming KV (past frames' KV kept across "
                        "windows; approximate) and its trajectory difference to the full recompute; closed loop: the "
                        "policy streams (compare with a run without it: --compare-with)")
    p.add_argument("--kv-refresh-windows", type=int, default=0,
                   help="with --kv-stream: every this many windows one computed whole (default 0: never)")
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)
    from .closed_loop import add_args as add_closed_loop_args
    add_closed_loop_args(p)
    p.set_defaults(func=cmd_eval)
