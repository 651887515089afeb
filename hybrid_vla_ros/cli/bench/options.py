"""The options of `hybrid-vla bench` and `hybrid-vla memory`."""

from __future__ import annotations

from ..common import add_model_args, add_placement_args
from .expert_split import add_args as add_expert_split_args
from .memory import cmd_memory
from .modes import cmd_bench
from .scenarios import DEFAULT_MODES, LOAD_STEP_FRAMES, MODES_FRAMES


def register(sub) -> None:
    _bench_parser(sub)
    _memory_parser(sub)


def _bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="native vs serial vs pipelined (each transport), one run, JSON + plot")
    add_model_args(p, default_preset="bench"); add_placement_args(p)
    p.add_argument("--partition", type=int, default=None, help="default: the planner's best cut for this machine "
                                                               "(hybrid-vla plan)")
    p.add_argument("--frames", type=int, default=None,
                   help=f"frames measured (default {MODES_FRAMES} for modes, {LOAD_STEP_FRAMES} for load-step)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--max-in-flight", type=int, default=2)
    p.add_argument("--transports", default="inproc,shm,inline", help="handovers of the pipelined modes")
    p.add_argument("--modes", default=DEFAULT_MODES,
                   help="modes to run side by side (graph: the three ROS nodes in one process; graph_processes: "
                        "one process per node)")
    p.add_argument("--chunks", default="4", help="chunked prefill of the *_chunked modes: a count 2..64 or 'camera' "
                   "(one chunk per camera); chunk-curve: a comma list (default 1,2,3,4,6,8,12,16,camera)")
    p.add_argument("--gil", action="store_true", help="the one-process graph mode also samples each thread's "
                   "GIL-held share with py-spy (its sampling costs a little CPU: off by default)")
    p.add_argument("--no-peer", action="store_true", help="with CUDA: skip the accelerate device_map peer")
    p.add_argument("--json", default=None, help="write the full report (with per-frame timelines) here")
    p.add_argument("--plot", default=None, help="write the timeline/period PNG here")
    p.add_argument("--suffix-dtypes", default="fp32,bf16,int8",
                   help="suffix-dtypes: the CPU suffix's dtypes, each at its planned cut")
    p.add_argument("--scenario", default="modes",
                   choices=("modes", "load-step", "preprocess", "faults", "chunk-curve", "suffix-dtypes",
                            "decode-heavy", "split-phases", "encode-once"),
                   help="modes: native/serial/pipelined side by side; load-step: scheduler under a competing load; "
                        "preprocess: decoding and resize/normalise of camera frames of --camera size; faults: "
                        "SIGKILL each node of a supervised graph mid-drive, then a soak (tiny preset unless "
                        "--preset names another); suffix-dtypes: serial and pipelined with the suffix in each "
                        "--suffix-dtypes at its planned cut; decode-heavy (or --preset alpamayo-bench): the "
                        "reduced Alpamayo, native vs split-serial vs pipelined across frames; split-phases: the "
                        "reduced Alpamayo, native vs split-serial per phase at each of --cuts, one frame at a time; "
                        "encode-once: the reduced Alpamayo (or --preset drive-history, a model reading its history) over "
                        "sliding windows, every image encoded vs each once")
    p.add_argument("--head", default="waypoints", choices=("waypoints", "action-tokens"),
                   help="action-tokens: ActionFlow packed decoding vs sequential (default preset bench-act)")
    p.add_argument("--pack", default="1,2,4,8", help="action-tokens: frames in flight K to compare")
    p.add_argument("--repeat", type=int, default=None,
                   help="action-tokens and decode-heavy: run each configuration this many times, interleaved; report "
                        "the median (default 1); split-phases: frames per mode, the median (default 3)")
    p.add_argument("--graph", action="store_true",
                   help="action-tokens: also the ROS graph (nodes in separate processes) at the largest K, with "
                        "one and two packed groups")
    add_expert_split_args(p)
    _scenario_args(p)
    p.set_defaults(func=cmd_bench)


def _scenario_args(p) -> None:
    p.add_argument("--soak-frames", type=int, default=1500, help="faults: frames per soak mode (10000: the long one)")
    p.add_argument("--camera", default="1920x1080", help="preprocess: camera size WIDTHxHEIGHT")
    p.add_argument("--step-on", type=int, default=25, help="load-step: frame at which the load starts")
    p.add_argument("--step-off", type=int, default=55, help="load-step: frame at which it stops (0: never)")
    p.add_argument("--zone", default=None, help="load-step: dynamic zone 'lo,hi' (default 0,L)")
    p.add_argument("--prefix-budget-mb", type=float, default=0.0, help="load-step: prefix memory budget (0: none)")
    p.add_argument("--sweep-frames", type=int, default=12, help="load-step: frames per static p in the sweep")


def _memory_parser(sub) -> None:
    p = sub.add_parser("memory", help="each stage in a process of its own: peak RSS vs the weight bytes info reports")
    add_model_args(p, default_preset="bench")
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--zone", default=None, help="dynamic zone 'lo,hi' (default: as info)")
    p.add_argument("--dtype", default="fp32", help="stage dtype: fp32, bf16, fp16")
    p.add_argument("--prefix-device", default="cpu", help="cpu or cuda (peak_cuda_bytes)")
    p.add_argument("--json", default=None)
    p.set_defaults(func=cmd_memory)
