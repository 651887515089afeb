"""Waypoints written as text (OneVL's answer, xiaomi-research/onevl @f4e6f05): a plan the LLM decodes token by token
over its whole vocabulary, as `[x, y, h], [x, y, h], ...` inside `<answer>...</answer>`, then read back into a
Trajectory here.

The authors' NAVSIM answer (output/navsim/convert_to_eval.py `_response_to_traj`; infer_onevl.py's `answer_prefix`):
8 poses, each x forward and y left in metres and the heading in radians, in the ego frame at the frame's stamp, at
0.5 s steps (NAVSIM's 4 s horizon at 2 Hz); the prompt ends with `<answer>[` (the prefix run_infer.sh passes for
NAVSIM), so the generated text starts inside the first pose. Their reader strips tags and tries two bracketings,
taking whatever numbers it finds. Here the reading is strict, because a car acts on it: exactly the model's pose
count, each with the expected count of finite numbers, nothing but the closing tag and end-of-text after the last
pose. Anything else is an InputError saying what was wrong; nothing is published for such a frame.
"""

from __future__ import annotations

import json
import math

import numpy as np

from ...errors import InputError, expect

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
VALUES = {2: ("x", "y"), 3: ("x", "y", "heading")}
MAX_ABS_M = 1000.0     # a pose farther than this from the ego in one horizon is no plan


def format_poses(poses: np.ndarray, decimals: int = 2) -> str:
    """(N, k) poses -> `[x, y, h], [x, y, h], ...` (the answer's body, without the tags)."""
    return ", ".join("[" + ", ".join(f"{v:.{decimals}f}" for v in row) + "]" for row in np.asarray(poses))


def answer_body(text: str, end_texts: tuple[str, ...] = ()) -> str:
    """The generated text (the prompt's answer prefix in front) -> the poses' text: the closing tag and the end of
    text after it cut off, refused when anything else follows the poses."""
    body = text.strip()
    for end in end_texts:
        if end and body.endswith(end):
            body = body[:-len(end)].rstrip()
    expect(body.endswith(ANSWER_CLOSE), InputError,
           f"answer text does not end with {ANSWER_CLOSE} (cut off by the token budget, or not an answer): "
           f"{clip(text)!r}")
    body = body[:-len(ANSWER_CLOSE)].strip()
    if body.startswith(ANSWER_OPEN):
        body = body[len(ANSWER_OPEN):].strip()
    return body


def parse_poses(text: str, poses: int, values: int, end_texts: tuple[str, ...] = ()) -> np.ndarray:
    """Answer text -> (poses, values) float64. Accepts `[a, b, c], ...` and `[[a, b, c], ...]`."""
    expect(values in VALUES, InputError, f"{values} values a pose: expected one of {sorted(VALUES)}")
    body = answer_body(text, end_texts)
    try:
        rows = json.loads(body if body.startswith("[[") else "[" + body + "]")
    except json.JSONDecodeError as exc:
        raise InputError(f"answer text is not a list of poses ({exc.msg} at {exc.pos}): {clip(body)!r}") from None
    expect(isinstance(rows, list) and all(isinstance(r, list) for r in rows), InputError,
           f"answer text is not a list of poses: {clip(body)!r}")
    expect(len(rows) == poses, InputError, f"answer has {len(rows)} poses, the model writes {poses}: {clip(body)!r}")
    for i, row in enumerate(rows):
        expect(len(row) == values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in row),
               InputError, f"answer pose {i} is {row!r}: expected {values} numbers ({', '.join(VALUES[values])})")
        expect(all(math.isfinite(v) and abs(v) <= MAX_ABS_M for v in row), InputError,
               f"answer pose {i} is {row!r}: a value is not finite or beyond {MAX_ABS_M:g}")
        expect(values == 2 or abs(row[2]) <= 2 * math.pi, InputError,
               f"answer pose {i} is {row!r}: heading {row[2]} rad is beyond one turn")
    return np.asarray(rows, dtype=np.float64)


def trajectory_points(poses: np.ndarray, dt_s: float) -> np.ndarray:
    """(N, 2 or 3) poses at dt_s steps from the ego -> (N, 5) x, y, heading, speed, time_from_start (a Trajectory's
    columns). Without a heading value, the heading is the direction of travel into each pose; the speed is each
    step's length over dt_s."""
    xy = poses[:, :2]
    steps = np.diff(np.vstack([np.zeros((1, 2)), xy]), axis=0)
    heading = poses[:, 2] if poses.shape[1] == 3 else np.arctan2(steps[:, 1], steps[:, 0])
    speed = np.hypot(steps[:, 0], steps[:, 1]) / dt_s
    t = np.arange(1, len(poses) + 1) * dt_s
    return np.column_stack([xy, heading, speed, t])


def clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
