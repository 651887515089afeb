"""One parameter of a node's table (ros/params.py): its type, bounds and description, the check of a value
(a ConfigError naming the parameter, the value and what is allowed) and its JSON schema; the decode policy's
parameters, which the prefix's and the suffix's tables share; the suffix's re-timing parameters. ROS-free."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.decode.policy import MAX_STOP_IDS, MAX_TEMPERATURE, MAX_TOKENS
from ..engine.pipeline.limits import AUTO
from ..errors import ConfigError, expect


@dataclass(frozen=True)
class ParamSpec:
    name: str
    type: str                      # "int", "double", "bool", "string", "int_array", "string_array"
    description: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    dynamic: bool = False          # may change at run time (ros2 param set)
    nonempty: bool = False         # strings: at least one non-blank character
    auto: bool = False             # doubles: AUTO (-1) is allowed too = derived from measured times
    parse: object = None           # int_or_string: value -> parsed (raises ConfigError); bounds and choices
    #                                are then only what the schema and the docs say

    def check(self, value, where: str = "parameter"):
        """Raises ConfigError naming the parameter, the value and what is allowed."""
        label = f"{where} '{self.name}'"
        python = {"int": int, "double": (int, float), "bool": bool, "string": str}
        if self.type == "int_or_string":   # declared with dynamic typing: `chunks: 4` and `chunks: camera` alike
            expect(isinstance(value, (int, str)) and not isinstance(value, bool), ConfigError,
                   f"{label}={value!r}: expected an integer or a string")
            try:
                self.parse(value)
            except ConfigError as exc:
                raise ConfigError(f"{label}: {exc}") from None
        elif self.type in python:
            expect(isinstance(value, python[self.type]) and (self.type == "bool" or not isinstance(value, bool)),
                   ConfigError, f"{label}={value!r}: expected {self.type}")
            self._check_range(value, label)
        else:
            item = int if self.type == "int_array" else str
            expect(isinstance(value, (list, tuple)) and all(isinstance(v, item) and not isinstance(v, bool)
                                                            for v in value),
                   ConfigError, f"{label}={value!r}: expected a list of {item.__name__}")
            for v in value:
                self._check_range(v, label)
        return value

    def _check_range(self, value, label: str) -> None:
        if self.auto and value == AUTO:
            return
        if self.nonempty:
            expect(value.strip() != "", ConfigError, f"{label}={value!r}: must not be empty")
        if self.choices:
            expect(value in self.choices, ConfigError, f"{label}={value!r}: expected one of {list(self.choices)}")
        if self.minimum is not None:
            expect(value >= self.minimum, ConfigError, f"{label}={value!r}: below the minimum {self.minimum}")
        if self.maximum is not None:
            expect(value <= self.maximum, ConfigError, f"{label}={value!r}: above the maximum {self.maximum}")

    def json_schema(self) -> dict:
        scalar = {"int": "integer", "double": "number", "bool": "boolean", "string": "string"}
        if self.type == "int_or_string":
            return {"anyOf": [{"type": "integer", "minimum": self.minimum, "maximum": self.maximum},
                              {"type": "string", "enum": list(self.choices)}], "description": self.description}
        if self.type in scalar:
            schema = {"type": scalar[self.type]}
            target = schema
        else:
            target = {"type": "integer" if self.type == "int_array" else "string"}
            schema = {"type": "array", "items": target}
        if self.choices:
            target["enum"] = list(self.choices)
        if self.nonempty:
            target["minLength"], target["pattern"] = 1, "\\S"
        if self.minimum is not None:
            target["minimum"] = self.minimum
        if self.maximum is not None:
            target["maximum"] = self.maximum
        if self.auto:  # AUTO, or a value in range
            bounds = {k: target.pop(k) for k in ("minimum", "maximum") if k in target}
            target["anyOf"] = [{"enum": [AUTO]}, bounds]
        schema["description"] = self.description
        return schema


# ---- the decode policy's parameters (engine/decode/policy.py), in the prefix's and the suffix's table -----------
# The suffix picks each token by them, the prefix ends frames (and frees their KV slots) by the same rule, so both
# YAMLs carry the same values. Read-only: a change mid-stream would split the sides. Checked here for type and
# bounds, then by DecodePolicy at configure (a ConfigError saying what and why).

SAME = "; the same value on the prefix and the suffix"


def decode_params() -> list[ParamSpec]:
    return [
        ParamSpec("decode.vocabulary", "string", "action-token models: actions = decode over the action-token bins "
                  "(a trajectory); full = over every token id (text reasoning: tokens only, in ~/debug/trajectory_info)"
                  + SAME, choices=("actions", "full")),
        ParamSpec("decode.sample", "bool", "action-token models: false = greedy; true = one seeded draw per token "
                  "(temperature, top_p; seeded by decode.seed and the frame's stamp: reproducible)" + SAME),
        ParamSpec("decode.temperature", "double", "sampled decoding: logits divided by this before the softmax"
                  + SAME, 0.01, MAX_TEMPERATURE),
        ParamSpec("decode.top_p", "double", "sampled decoding: draw among the most likely tokens whose mass reaches "
                  "this (1 = all)" + SAME, 0.01, 1.0),
        ParamSpec("decode.seed", "int", "sampled decoding: seeds each frame's draws with the frame's stamp" + SAME,
                  0, 2 ** 31 - 1),
        ParamSpec("decode.stop_ids", "int_array", f"token ids that end a frame's decode (kept as its last token; at "
                  f"most {MAX_STOP_IDS}, inside the decoded vocabulary); [-1] = none (ROS parameter files cannot "
                  f"carry an empty typed array)" + SAME, -1, 2 ** 31 - 1),
        ParamSpec("decode.max_tokens", "int", "tokens a frame decodes at most; 0 = the model's action length "
                  "(each KV ring slot holds the prompt + this)" + SAME, 0, MAX_TOKENS),
    ]


# ---- an Alpamayo release's flow matching (model/plugins/alpamayo/flow.py), in the prefix's table ---------------
# The prefix decides what a frame runs by and sends it with the frame's first message (engine/expert_serve/); the
# suffix follows it. Read-only, as decode.* (a frame's settings are fixed when it starts).

def flow_params() -> list[ParamSpec]:
    return [
        ParamSpec("flow.steps", "int", "Alpamayo releases: Euler steps of the action expert's flow matching; 0 = the "
                  "release's diffusion_cfg num_inference_steps (10 released)", 0, 1000),
        ParamSpec("flow.guidance_weight", "double", "Alpamayo 1.5: classifier-free guidance weight w (the velocity "
                  "(1 - w) v_route-free + w v_route: a second prefill without the route span, fed the same "
                  "reasoning, every Euler step on both caches); 1.0 = no guidance (nothing extra runs). Needs the "
                  "release's route tokens and its tokenizer (the route text of the next turn from ~/input/route; a "
                  "frame without one runs unguided) or route ids in its prompt_ids.json", 0.0, 100.0),
    ]


# ---- the suffix's output re-timed to the present (engine/retime.py, ros/outputs/present.py) ------------------------

def retime_params() -> list[ParamSpec]:
    return [
        ParamSpec("output_retime", "bool", "the plan re-timed to the present (engine/retime.py), in a frame_id "
                  "other than base_link: stamped at publish time, the first point the ego's pose from the newest "
                  "kinematic state (t = 0), then every output_dt_s up to the plan's horizon (waypoints already past "
                  "dropped); a frame too old for it, or whose pose the ego's jumped away from, is refused and "
                  "counted (retime_too_old, retime_no_current_pose, pose_jump). false, and always with base_link: "
                  "the model's waypoints as predicted, stamped with the camera's stamp, times counted from it",
                  dynamic=True),
        ParamSpec("output_dt_s", "double", "output_retime: seconds between the re-timed points (0.1: Autoware's "
                  "trajectory processor's step)", 0.01, 1.0, dynamic=True),
        ParamSpec("output_pose_jump_m", "double", "output_retime: a frame is refused, counted as pose_jump (a "
                  "localization reset: its plan would start with that step from the ego), when two consecutive "
                  "odometry samples since its stamp, or its matched pose and the ego's newest, lie further apart "
                  "than the car could have driven in between (the odometry speed x the time, changing by up to "
                  "9.8 m/s^2) plus this", 0.1, 1000.0, dynamic=True),
        ParamSpec("output_pose_jump_rad", "double", "output_retime: the same for the yaw: the odometry's yaw rate x "
                  "the time (changing by up to 3 rad/s^2) plus this; 3.1416 = the yaw never refuses", 0.01, 3.1416,
                  dynamic=True),
    ]
