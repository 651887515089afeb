"""`hybrid-vla eval --closed-loop`: its options and its run (cli/learn.py registers them on `eval`)."""

from __future__ import annotations

import sys


def add_args(parser) -> None:
    group = parser.add_argument_group("closed loop (issue 41)")
    group.add_argument("--closed-loop", action="store_true",
                       help="drive held-out scenarios in closed loop under each mode's timing instead of the "
                            "open-loop ADE/FDE (default model: the shipped builtin:drive)")
    group.add_argument("--scenarios", type=int, default=20, help="closed loop: scenarios, seeds --seed .. (default 20)")
    group.add_argument("--timing", default="measured,orion-paper",
                       help="closed loop: comma-separated timing profiles: measured (this machine's stage times of "
                            "the engine), orion-paper (the paper's ORION figures), minddrive-paper (the paper's MindDrive figures, "
                            "the suffix at ORION's ratio), orion-planned (the planner's "
                            "ORION on the paper's L20 + Xeon 8470Q) (default measured,orion-paper)")
    group.add_argument("--lights", action="store_true",
                       help="closed loop: a traffic light on every route (the renderer draws no light and the "
                            "shipped model never saw one: it measures red-light counting, not the model)")
    group.add_argument("--oracle", action="store_true",
                       help="closed loop: the drives' ground-truth driver as the policy instead of the model")
    group.add_argument("--animate", metavar="GIF", default=None,
                       help="closed loop: instead of the table, one drive (scenario --seed, mode --mode of the first "
                            "--timing profile) as a GIF: the front camera beside a bird's-eye view with the plan")
    group.add_argument("--mode", default="pipelined_retimed",
                       help="closed loop --animate: the mode driven (instant, native, serial, pipelined, chunked, "
                            "pipelined_retimed, native_retimed; default pipelined_retimed)")
    group.add_argument("--graph", action="store_true",
                       help="closed loop: the real ROS graph in the loop (one process, use_sim_time; the world as a "
                            "node publishing /clock, camera and odometry); plans take effect as they arrive")
    group.add_argument("--drive-seconds", type=float, default=None,
                       help="closed loop --graph / --animate: end each drive after this much world time (default: "
                            "the scenario's own limit, twice its length at its start speed + 20 s)")
    group.add_argument("--modes", default="",
                       help="closed loop: comma-separated modes to run (default all; instant, native and "
                            "native_retimed always, the baselines each row's driving score is compared with)")
    group.add_argument("--burst-probability", type=float, default=0.0,
                       help="closed loop: a camera burst frame drop starts with this probability per frame (the camera "
                            "repeats its last frame for --burst-frames frames; Bench2Drive-Robust's kind; default 0)")
    group.add_argument("--burst-frames", type=int, default=5, help="closed loop: frames a burst lasts (default 5)")
    group.add_argument("--localisation-noise", default="0,0", metavar="M,RAD",
                       help="closed loop: the believed pose's Gaussian noise per camera frame, metres per axis and "
                            "radians of heading (default 0,0)")
    group.add_argument("--control-delay-ms", type=float, default=0.0,
                       help="closed loop: the controller's commands reach the car this much later through a FIFO "
                            "(compute-to-control latency; default 0)")
    group.add_argument("--graph-retimed", action="store_true",
                       help="closed loop --graph: the suffix publishes map-frame plans re-timed to its present "
                            "(output_retime), which the world follows as placed (default: base_link, as predicted)")
    group.add_argument("--graph-timing", default="",
                       help="closed loop --graph: a timing profile (orion-paper, minddrive-paper) whose pipelined "
                            "latency the world holds each plan to at least after its frame: the compute time this "
                            "CPU does not take, added as a delay (default: none, the graph's own)")
    group.add_argument("--compare-with", metavar="JSON", default=None,
                       help="closed loop: another run's --json on the same scenarios (another model, or without "
                            "--kv-stream): each row's driving score minus that run's, paired, with its 95%% interval")
    group.add_argument("--time-scale", type=float, default=1.0,
                       help="closed loop --graph: world seconds per wall second (< 1 slows the world; default 1)")


def run_graph(args) -> int:
    """--graph: each held-out scenario driven by the graph (ros/closed_loop/run.py); a row per scenario + the mean."""
    from ..learn.closed_loop.evaluate import HELD_OUT_BELOW
    from ..sim.metrics import aggregate
    from ..errors import ConfigError, expect
    from ..model.load import load_vla
    from ..report import write_report
    from ..ros.closed_loop.run import drive_in_loop
    from ..ros.launch_support.bringup import graph_params
    seeds = list(range(args.seed, args.seed + args.scenarios))
    expect(args.scenarios >= 1 and seeds[-1] < HELD_OUT_BELOW and args.time_scale > 0, ConfigError,
           f"closed loop --graph: held-out seeds 0..{HELD_OUT_BELOW - 1} and --time-scale > 0")
    checkpoint = args.checkpoint or ("" if args.preset else "builtin:drive")
    spec = load_vla(preset=args.preset, checkpoint=checkpoint or None).spec
    expect(not spec.context, ConfigError,
           f"closed loop --graph: model '{spec.name}' needs the frame context {spec.context}; the world node "
           f"publishes cameras and odometry, no CameraInfo, /tf_static or route yet")
    params = graph_params(overrides=graph_overrides(spec, checkpoint, args.preset, args.graph_retimed))
    latency_s = graph_latency_s(args.graph_timing)
    routes = []
    for seed in seeds:
        routes.append({"seed": seed, **drive_in_loop(params, spec, seed, args.time_scale, args.drive_seconds,
                                                     latency_s=latency_s)})
        r = routes[-1]
        print(f"scenario {seed}: {r['end']}, driving score {r['driving_score']:.1f}, {r['plans_received']} plans "
              f"(mean age {r['mean_plan_age_s'] or 0:.3f} s), {r['wall_s']:.0f} s wall", file=sys.stderr)
    mean = aggregate(routes)
    output = "map, re-timed" if args.graph_retimed else "base_link"
    write_report({"mode": "graph", "model": spec.name, "time_scale": args.time_scale, "seeds": seeds, "routes": routes,
                  "mean": mean, "output": output, "timing": args.graph_timing or "graph",
                  "added_latency_s": latency_s}, args.json)
    timing = args.graph_timing or "its own"
    print(f"graph in the loop ({spec.name}, output {output}, timing {timing}, time scale {args.time_scale}): "
          f"{len(seeds)} scenarios, driving score "
          f"{mean['driving_score']:.1f}, completion {mean['completion']:.3f}, collisions {mean['collisions']}, "
          f"lane departures {mean['lane_departures']}, mean plan age {mean['mean_plan_age_s'] or 0:.3f} s")
    return 0


def graph_overrides(spec, checkpoint: str, preset: str | None, retimed: bool) -> dict:
    """The graph's parameters for the world: the model, the world's cameras, a cut fitted to the model, and the
    suffix's output (base_link as predicted, or map re-timed to the present)."""
    model = {"model.checkpoint": checkpoint, "model.preset": preset or ""}
    cameras = [f"/hybrid_vla_world/camera{i}/image" for i in range(spec.num_cameras)]
    p = spec.num_blocks // 2   # the cut and its zone fitted to the model (the shipped config's are the bench's)
    cut = {"partition_point": p, "dynamic_zone_min": max(0, p - 1), "dynamic_zone_max": min(spec.num_blocks, p + 1)}
    output = {"frame_id": "map", "output_retime": True} if retimed else {"frame_id": "base_link",
                                                                         "output_retime": False}
    return {"hybrid_vla_prefix": {**model, **cut, "camera_topics": cameras, "image_transport": "raw"},
            "hybrid_vla_suffix": {**model, **cut, **output},
            "hybrid_vla_scheduler": {**model, "initial_partition": p, "dynamic_zone_min": cut["dynamic_zone_min"],
                                     "dynamic_zone_max": cut["dynamic_zone_max"]}}


def graph_latency_s(profile: str) -> float:
    """--graph-timing: the profile's pipelined latency (s), 0 for none."""
    if not profile:
        return 0.0
    from ..errors import ConfigError, expect
    from ..sim.timing import minddrive_paper, mode_timings, orion_paper
    stages = {"orion-paper": orion_paper, "minddrive-paper": minddrive_paper}
    expect(profile in stages, ConfigError, f"--graph-timing {profile!r}: one of {', '.join(stages)}")
    return mode_timings(stages[profile]())["pipelined"].latency_s


def run_animation(args, policy) -> int:
    from ..errors import ConfigError, expect
    from ..sim.animate import RecordingDrive, animate
    from ..learn.closed_loop.evaluate import HELD_OUT_BELOW, timings
    from ..sim.world import random_scenario
    from ..model.presets import get_preset
    expect(0 <= args.seed < HELD_OUT_BELOW, ConfigError, f"--animate: a held-out seed 0..{HELD_OUT_BELOW - 1}")
    profile = next(p for p in args.timing.split(",") if p)
    plans, _ = timings([profile], policy, [args.seed])
    chosen = {mode: timing for (prof, mode), timing in plans.items()}
    expect(args.mode in chosen, ConfigError, f"--mode {args.mode!r}: one of {sorted(chosen)}")
    spec = getattr(policy, "spec", None) or get_preset("drive")
    drive = RecordingDrive(random_scenario(args.seed, lights=args.lights), policy, chosen[args.mode], spec)
    record = drive.run(args.drive_seconds)
    frames = animate(drive.stills, drive.sc, f"{policy.name}, {profile} / {args.mode}, scenario {args.seed}",
                     args.animate)
    print(f"scenario {args.seed}, {profile} / {args.mode}: {record.end} after {record.rows[-1][0]:.1f} s; "
          f"{frames} frames -> {args.animate}")
    return 0


def perturbations(args):
    from ..errors import ConfigError
    from ..sim.perturb import Perturbations
    try:
        metres, radians = (float(v) for v in args.localisation_noise.split(","))
    except ValueError as exc:
        raise ConfigError(f"--localisation-noise {args.localisation_noise!r}: expected M,RAD (two numbers)") from exc
    return Perturbations(args.burst_probability, args.burst_frames, metres, radians, args.control_delay_ms / 1e3)


def run(args) -> int:
    from ..errors import ConfigError, expect
    expect(not (args.kv_stream and (args.graph or args.oracle)) and not (args.compare_with and args.graph),
           ConfigError, "closed loop: --kv-stream drives the model in the simulator's loop (not with --graph, whose "
                        "prefix takes kv_stream as a parameter, nor --oracle); --compare-with compares two such runs")
    if args.graph:
        return run_graph(args)
    from ..learn.closed_loop.evaluate import evaluate, plot_paths, table_lines
    from ..learn.closed_loop.model_policy import ModelPolicy
    from ..sim.policy import OraclePolicy
    from ..report import progress_printer, write_report
    if args.oracle:
        policy = OraclePolicy()
    else:
        from .common import model_from_args
        if not args.preset and not args.checkpoint:
            args.checkpoint = "builtin:drive"
        policy = ModelPolicy(model_from_args(args), kv_stream=args.kv_stream,
                             kv_refresh_windows=args.kv_refresh_windows)
    if args.animate:
        return run_animation(args, policy)
    profiles = tuple(p for p in args.timing.split(",") if p)
    modes = tuple(m for m in args.modes.split(",") if m) or None
    report = evaluate(policy, args.scenarios, args.seed, profiles, args.lights, progress_printer("closed loop"),
                      modes=modes, perturb=perturbations(args))
    if args.compare_with:
        import json
        from ..learn.closed_loop.evaluate import compared_with
        with open(args.compare_with) as f:
            report["compared_with"] = compared_with(report, json.load(f), args.compare_with)
    write_report(report, args.json)
    if args.plot:
        plot_paths(report, args.plot)
    for profile, st in report["stage_ms"].items():
        print(f"{profile}: native {st['native']:.1f} ms, prefix {st['prefix']:.1f} ms, handover {st['transfer']:.2f} "
              f"ms, suffix {st['suffix']:.1f} ms ({st['source']})")
    print(f"policy {report['policy']}, {report['scenarios']} held-out scenarios (seeds {report['seeds'][0]}.."
          f"{report['seeds'][-1]}), lights {'on' if report['lights'] else 'off'}, perturbations "
          f"{report['perturbations']['described']}; {report['note']}")
    print("\n".join(table_lines(report)))
    if "compared_with" in report:
        from ..learn.closed_loop.evaluate import comparison_lines
        print("\n".join(comparison_lines(report["compared_with"], report["policy"])))
    print(f"full report: {args.json or '(--json FILE)'}" + (f", paths: {args.plot}" if args.plot else ""),
          file=sys.stderr)
    return 0
