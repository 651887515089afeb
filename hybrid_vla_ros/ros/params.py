"""The parameters of each node, in one table: types, bounds, descriptions. ROS-free.

From this table the nodes declare typed parameters with descriptors (ranges), validate run-time changes,
and `hybrid-vla schema` writes the draft-07 JSON schema that CI checks the shipped YAML against.
Parameters are declared without defaults in code (Autoware convention): the YAML provides every value.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from ..engine.pipeline.limits import AUTO
from ..errors import ConfigError, expect
from .param_spec import ParamSpec, decode_params, flow_params, retime_params


AUTOSTART = ParamSpec("autostart", "bool", "configure and activate at start-up; false: stay unconfigured until "
                      "a lifecycle transition (ros2 lifecycle set, a launch file's events)")


def _parse_chunks(value):
    from ..engine.chunking import parse_chunks   # torch-free until a node checks the value
    return parse_chunks(value)


def _chunks(description: str) -> ParamSpec:
    return ParamSpec("chunks", "int_or_string", description, 1, 64, choices=("camera",), parse=_parse_chunks)


def _packing(pack: str, groups: str) -> list[ParamSpec]:
    return [ParamSpec("pack", "int", pack, 1, 64), ParamSpec("pack_groups", "int", groups, 1, 8)]


def _route() -> list[ParamSpec]:
    """The route as navigation input (route/, ros/inputs/route_input.py): the map and the target point's distance."""
    return [
        ParamSpec("map_path", "string", "lanelet2 map (.osm; .bin: lanelet2's binary format) of the route on "
                  "~/input/route (autoware_planning_msgs/LaneletRoute): each frame's navigation (next maneuver, goal "
                  "and target point) and, while a route navigates, its instruction (the checkpoint's "
                  "instruction_template); a map on ~/input/vector_map (LaneletMapBin) replaces it where it decodes; "
                  "empty = no map: default navigation (follow lane), counted"),
        ParamSpec("map_origin_lat_deg", "double", "latitude of the map frame's origin: projects an .osm whose nodes "
                  "lack local_x/local_y (Autoware's map_origin); unused when they have them", -90.0, 90.0),
        ParamSpec("map_origin_lon_deg", "double", "longitude of the map frame's origin (see map_origin_lat_deg)",
                  -180.0, 180.0),
        ParamSpec("route_lookahead_m", "double", "the navigation's target point: the route's centreline point "
                  "this far ahead of the ego (TransFuser/SimLingo-style target point)", 0.5, 500.0, dynamic=True),
    ]


def _common_model() -> list[ParamSpec]:
    return [
        AUTOSTART,
        ParamSpec("model.preset", "string", "named preset (used when model.checkpoint is empty)"),
        ParamSpec("model.checkpoint", "string", "local Hugging Face model directory (docs/CHECKPOINTS.md) or builtin:NAME (shipped, e.g. builtin:drive); each stage reads its side; empty = use model.preset"),
        ParamSpec("dynamic_zone_min", "int", "first partition of the dynamic zone; -1 = the partition point", -1, 1024),
        ParamSpec("dynamic_zone_max", "int", "last partition of the dynamic zone; -1 = the partition point", -1, 1024),
        ParamSpec("processing_time_warn_ms", "double", "diagnostics WARN above this stage time", 0.0, 1e6),
        ParamSpec("error_after_frames", "int", "diagnostics ERROR when WARN persists this many frames", 1, 10000),
        ParamSpec("diagnostics_period_s", "double", "period of /diagnostics", 0.05, 60.0),
        ParamSpec("cores", "int_array", "CPU cores for the stage worker; [-1] = default placement (ROS parameter "
                  "files cannot carry an empty typed array)", -1, 4095),
        ParamSpec("threads", "int", "torch intra-op threads of the stage worker; 0 = one per core", 0, 1024),
    ]


PREFIX_PARAMS = _common_model() + [
    ParamSpec("device", "string", "prefix device", choices=("auto", "cuda", "cpu")),
    ParamSpec("dtype", "string", "prefix compute dtype (also the boundary dtype)", choices=("fp32", "bf16", "fp16")),
    ParamSpec("partition_point", "int", "blocks [0, p) run here; must lie in the dynamic zone", 0, 1024,
              dynamic=True),
    ParamSpec("camera_topics", "string_array", "camera topics synchronised by stamp, one per model camera "
              "(a single camera: [~/input/image])"),
    ParamSpec("image_transport", "string", "raw sensor_msgs/Image or sensor_msgs/CompressedImage",
              choices=("raw", "compressed")),
    ParamSpec("camera_info_topics", "string_array", "sensor_msgs/CameraInfo topic of each camera, in camera_topics' "
              "order (the frame context: intrinsics, image size and, with /tf_static, base_link -> the camera's "
              "frame; context.py); [auto] = image_transport's sibling of each camera topic, <ns>/camera_info"),
    ParamSpec("pose_history", "int", "the frame context's ego history: this many map-frame poses before the "
              "frame's stamp (from ~/input/kinematic_state); 0 = none", 0, 64),
    ParamSpec("pose_history_step_s", "double", "seconds between the history's poses (the k-th at stamp - k x step, "
              "interpolated); 0 = the last pose_history odometry samples as they came", 0.0, 10.0),
    ParamSpec("sync_skew_ms", "double", "largest stamp difference between cameras of one frame", 0.0, 10000.0),
    ParamSpec("max_image_megapixels", "double", "largest camera image taken, in megapixels, checked before "
              "decoding (a few-KB PNG can declare 170 MP: 0.5 GB decoded)", 0.01, 1000.0),
    ParamSpec("use_kinematic_state", "bool", "read ego speed and yaw rate from ~/input/kinematic_state"),
    ParamSpec("stale_kinematic_state", "string", "a frame whose nearest kinematic state lies further from its stamp "
              "than 5 x the odometry's measured period (the median interval of its last 16 samples), within "
              "[0.1 s, 1 s] (1 s until two samples came), or that has none: refuse = not served (rejected as "
              "kinematic_state_stale / kinematic_state_missing, on ~/debug/dropped_frames); serve_flagged = served "
              "with that old state (0 m/s when none) and counted as flagged; either way the 'kinematic_state' "
              "diagnostic is ERROR until odometry fresh for the frames returns. Unused with use_kinematic_state "
              "false (no odometry expected: the model is given 0 m/s)",
              choices=("refuse", "serve_flagged"), dynamic=True),
    ParamSpec("instruction", "string", "text instruction given to the model while no route navigates it (else "
              "the route's, see map_path)", dynamic=True),
    ParamSpec("expected_delay_ms", "double", "a delay-aware model's (spec delay_aware) expected capture-to-effect "
              "delay, its prompt's instruction: it plans from where the car will be then (0: none; others ignore it)",
              0.0, 5000.0, dynamic=True),
    *_route(),
    ParamSpec("input_policy", "string", "latest: newest frame wins, drops counted; lossless: queue (replay)",
              choices=("latest", "lossless")),
    ParamSpec("max_in_flight", "int", "frames taken by the prefix and not yet finished by the suffix (suffix in "
              "this process); across processes: shared-memory ring slots", 1, 64),
    _chunks("chunked prefill across the cut (engine/chunking.py): a frame's tokens in chunks, each one's boundary "
            "state published as soon as blocks [0, p) are done with it, so the suffix starts before the prefix "
            "ends; 1 = unchunked (bit-exact); 2..64 = near-equal token spans; camera = one chunk per camera's "
            "image block. The shared-memory ring gets max_in_flight x chunks per frame slots. Waypoint heads "
            "with a causal prompt only"),
    ParamSpec("kv_stream", "bool", "a waypoint model reading its history: keep past frames' KV per side of the cut "
              "(engine/kv_stream/; approximate: DRIVING.md; a move of the cut rebuilds it; not with chunks > 1)"),
    ParamSpec("kv_refresh_windows", "int", "with kv_stream: every this many windows one computed whole (0: never)",
              0, 100000),
    ParamSpec("boundary_transport", "string", "auto: in-process when the suffix shares the process, else "
              "shared memory; inline: serialised payload on the topic (remote hosts, recording)",
              choices=("auto", "inproc", "shm", "inline")),
    ParamSpec("stale_after_ms", "double", "drop a frame whose stamp is older than this when taken; 0 = never",
              0.0, 1e7),
    *_packing("action-token models (ActionFlow): frames in flight per packed group, K (one forward = the "
              "newest frame's prefill + a decode step of each older one); unused by waypoint heads",
              "action-token models: independent packed groups that alternate, so the prefix runs one group's "
              "step while the suffix runs another's (1 = one side idles each step)"),
    ParamSpec("token_timeout_s", "double", "action-token models: a packed step whose tokens have not come back "
              "from the suffix after this fails its frames (counted as token_feedback_timeout); -1 = auto: 5 x the "
              "longest recent token round trip, at least 2 s (60 s until one is measured); a value below the "
              "measured round trip is kept, and warned about (docs/RELIABILITY.md)", 0.01, 600.0, auto=True),
] + decode_params() + flow_params()

SUFFIX_PARAMS = _common_model() + [
    ParamSpec("dtype", "string", "CPU suffix compute dtype (waypoint and action-token models alike); int8: the "
              "blocks' linear layers in int8 (weights per channel, activations per token; smoothed where the "
              "checkpoint has an int8 calibration), the rest bf16 where the CPU has native bf16, else fp32 (an "
              "Alpamayo release: the rest fp32, and a fixed cut); auto: the fastest of fp32, bf16 (native bf16 only) "
              "and int8 (only with a calibration within int8_max_deviation_m; never for a release) by a start-up "
              "probe on the worker's cores", choices=("fp32", "bf16", "fp16", "int8", "auto")),
    ParamSpec("int8_max_deviation_m", "double", "dtype auto takes int8 only where the checkpoint's int8 "
              "calibration (hybrid-vla calibrate) measured a mean trajectory deviation from fp32 of at most this "
              "(metres; every block on the CPU, the worst cut)", 0.0, 10.0),
    ParamSpec("boundary_dtype", "string", "dtype of incoming boundary states; auto: whatever the prefix sends "
              "(fp32, fp16, bf16); a named one refuses any other (counted as boundary_dtype_mismatch); either is "
              "converted to the suffix dtype", choices=("auto", "fp32", "bf16", "fp16")),
    ParamSpec("partition_point", "int", "expected partition; each state runs from its own within the zone",
              0, 1024, dynamic=True),
    _chunks("the chunking its prefix sends (the prefix's values): sizes the boundary subscription's history and "
            "the worker's queue (x chunks per frame) only; the suffix runs whatever chunking arrives, each frame's "
            "chunks in order (one out of order or foreign is refused and counted, its frame dropped once)"),
    *_packing("action-token models: the prefix's pack; with pack_groups it bounds the KV ring a packed step "
              "may claim here (pack x pack_groups slots: a step claiming more is refused before anything is "
              "allocated, counted as invalid_boundary)", "action-token models: the prefix's pack_groups (see pack)"),
    *decode_params(),
    ParamSpec("max_in_flight", "int", "Alpamayo releases: frames open here at once, each holding its KV cache "
              "(~440 MB a frame at real size); at least the prefix's max_in_flight (a frame beyond it replaces the "
              "oldest open one: frames_replaced). Other kinds: unused (the prefix bounds them)", 1, 64),
    ParamSpec("max_output_age_ms", "double", "drop (and count as stale_output) a trajectory whose frame arrived at "
              "the prefix longer ago than this at publish time; 0 = never; -1 = auto: 5 x the measured frame time, "
              "at least 500 ms; a value below the measured frame time is kept, and warned about "
              "(docs/RELIABILITY.md)", 0.0, 1e7, dynamic=True, auto=True),
    ParamSpec("numa_node", "int", "pin the worker to this NUMA node's cores; -1 = no NUMA pinning", -1, 63),
    ParamSpec("warm_standby", "bool", "a second suffix process (hybrid_vla_suffix_standby; hybrid-vla graph --processes) "
              "with its weights loaded takes over within ~0.3 s when this one goes silent"),
    ParamSpec("output_type", "string", "trajectory message type; auto = Autoware when importable, else Path",
              choices=("auto", "autoware", "autoware_auto", "path")),
    ParamSpec("generator_name", "string", "this trajectory generator's name in ~/output/trajectories "
              "(CandidateTrajectories: GeneratorInfo.generator_name); generator_id = uuid5 of it, the same at every "
              "start: give each generator of a car its own name", nonempty=True),
    ParamSpec("frame_id", "string", "frame of the output trajectory: base_link = the ego frame as predicted; any "
              "other (map) = waypoints moved with the pose of ~/input/kinematic_state matched to the frame"),
    *retime_params(),   # output_retime and its step and pose jump allowances (engine/retime.py)
    *_route(),   # the route: the turn indicators of ~/output/turn_indicators (ros/outputs/turn_signals.py)
]

SCHEDULER_PARAMS = [
    AUTOSTART,
    ParamSpec("model.preset", "string", "preset whose block count bounds the partition"),
    ParamSpec("model.checkpoint", "string", "checkpoint (directory or builtin:NAME) whose block count bounds the partition; empty = preset"),
    ParamSpec("initial_partition", "int", "partition published on activation", 0, 1024),
    ParamSpec("dynamic_zone_min", "int", "lowest partition the scheduler may choose; -1 = initial_partition (as for the stages)", -1, 1024),
    ParamSpec("dynamic_zone_max", "int", "highest partition the scheduler may choose; -1 = initial_partition (as for the stages)", -1, 1024),
    ParamSpec("update_period_s", "double", "how often the policy runs", 0.01, 60.0),
    ParamSpec("hysteresis", "double", "simple: stage-time imbalance (fraction) needed to move p; cost: predicted period gain (fraction, capped at 0.9) needed to move p", 0.0, 10.0, dynamic=True),
    ParamSpec("cooldown_s", "double", "minimum time between two moves", 0.0, 3600.0, dynamic=True),
    ParamSpec("backlog_threshold", "int", "suffix backlog that triggers an immediate move", 1, 1000, dynamic=True),
    ParamSpec("policy", "string", "cost: online cost model (period-minimising p under the memory budget); "
              "simple: one block at a time towards balance", choices=("cost", "simple")),
    ParamSpec("profile_json", "string", "a `hybrid-vla plan --json` or `hybrid-vla profile` report seeding the "
              "cost model; empty = uniform block costs, calibrated online"),
    ParamSpec("prefix_memory_budget_mb", "double", "prefix-device memory the model may hold; 0 = no budget",
              0.0, 1e7),
]

NODE_PARAMS = {"hybrid_vla_prefix": PREFIX_PARAMS, "hybrid_vla_suffix": SUFFIX_PARAMS,
               "hybrid_vla_scheduler": SCHEDULER_PARAMS}


def _nest(params) -> dict:
    """Dotted names become nested objects, as ROS YAML writes them: model.preset -> model: {preset: ...}."""
    obj = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    groups: dict[str, list] = {}
    for p in params:
        head, _, rest = p.name.partition(".")
        if rest:
            groups.setdefault(head, []).append(replace(p, name=rest))
        else:
            obj["properties"][head] = p.json_schema()
        if head not in obj["required"]:
            obj["required"].append(head)
    for head, members in groups.items():
        obj["properties"][head] = _nest(members)
    return obj


def node_schema(node: str) -> dict:
    definition = _nest(NODE_PARAMS[node])
    definition["properties"]["use_sim_time"] = {"type": "boolean", "description": "rclpy: use /clock"}
    definition["properties"]["qos_overrides"] = {"type": "object", "description": "rclpy: QoS overrides per topic"}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": f"Parameters for {node}",
        "type": "object",
        "definitions": {node: definition},
        "properties": {"/**": {"type": "object", "properties": {
            "ros__parameters": {"$ref": f"#/definitions/{node}"}}, "required": ["ros__parameters"]}},
        "required": ["/**"],
    }


def chosen_cores(values: list[int]) -> list[int]:
    """The `cores` parameter without its [-1] 'unset' marker."""
    return [c for c in values if c >= 0]


def flatten(params: dict, prefix: str = "") -> dict:
    """{'model': {'preset': 'x'}} -> {'model.preset': 'x'} (ROS nested parameter names)."""
    flat = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def load_node_params(path: str | Path, node: str) -> dict:
    """Flat parameters of `node` from a ROS params YAML: a per-node file (`/**:`) or a combined file keyed
    by node name. Every value is checked against the table."""
    path = Path(path)
    expect(path.is_file(), ConfigError, f"parameter file '{path}' does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"parameter file '{path}': not valid YAML ({exc})") from exc
    section = None
    for key in (node, f"/{node}", f"/**/{node}", "/**"):
        if isinstance(data.get(key), dict) and "ros__parameters" in data[key]:
            section = data[key]["ros__parameters"]
            break
    expect(section is not None, ConfigError, f"parameter file '{path}': no ros__parameters for node '{node}'")
    return check_node_params(node, flatten(section), str(path))


def rclpy_own(name: str) -> bool:
    """Parameters rclpy itself declares or reads (accepted in YAML and at run time, not in the table)."""
    return name == "use_sim_time" or name.startswith("qos_overrides.")


def check_node_params(node: str, values: dict, source: str) -> dict:
    specs = {p.name: p for p in NODE_PARAMS[node]}
    unknown = sorted(n for n in set(values) - set(specs) if not rclpy_own(n))
    expect(not unknown, ConfigError, f"{source}: unknown parameters {unknown} for {node}")
    missing = sorted(set(specs) - set(values))
    expect(not missing, ConfigError, f"{source}: {node} needs values for {missing} (no hidden defaults)")
    expect(not isinstance(values.get("use_sim_time", False), str) and isinstance(values.get("use_sim_time", False), bool),
           ConfigError, f"{source}: {node} parameter 'use_sim_time'={values.get('use_sim_time')!r}: expected bool")
    for name, value in values.items():
        if rclpy_own(name):
            continue
        if specs[name].type == "double" and isinstance(value, int) and not isinstance(value, bool):
            values[name] = float(value)
        specs[name].check(values[name], f"{source}: {node} parameter")
    return values


def markdown_row(spec: ParamSpec) -> str:
    bounds = ", ".join(spec.choices) if spec.choices else \
        f"{spec.minimum} .. {spec.maximum}" if spec.minimum is not None and spec.maximum is not None else ""
    bounds = f"{AUTO} (auto) or {bounds}" if spec.auto else bounds
    bounds = bounds or ("non-empty" if spec.nonempty else "")
    if spec.type == "int_or_string":
        bounds = f"{spec.minimum} .. {spec.maximum} or {', '.join(spec.choices)}"
    return f"| `{spec.name}` | {spec.type} | {bounds} | {'yes' if spec.dynamic else 'no (read-only)'} | {spec.description} |"


def markdown_table(node: str) -> str:
    """The parameter table of docs/INTERFACES.md for one node (what `hybrid-vla schema --docs` writes)."""
    head = "| name | type | range / choices | run-time | description |\n|---|---|---|---|---|\n"
    return head + "\n".join(markdown_row(spec) for spec in NODE_PARAMS[node]) + "\n"
