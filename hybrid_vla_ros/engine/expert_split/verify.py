"""`hybrid-vla verify` for an Alpamayo model: the split (runner.py run_split) against the unsplit reference
(run_reference) at every cut p, for the sampled decode and the expert's flow, without and (Alpamayo 1.5) with
route guidance. The model: a release directory, or a preset of model/plugins/alpamayo/tiny.py. Per p the largest
absolute difference of the trajectory (positions, rotations, actions) over the frames and both cases; a frame
whose reasoning tokens differ counts as inf.

Frames: synthetic, as the prefix node builds them (engine/expert_serve/frame_inputs.py): a window of the release's
cameras x the last 4 camera sets of 32 x 32 px (seeded noise; not resized into a release's pixel budget, which
checks the preprocessing, not the split: one image token per image), frame i's window ending at set i + 3, so
consecutive frames share 3 of 4 sets; 16 poses of ego history at 5 m/s in a gentle left turn, fixed text ids and a
route span; frame i samples with seed i. The split keeps each image's encoding across its frames, as the prefix
node does (vision_cache.py: frame 0 encodes every image, each later frame only its newest set); the reference
encodes every window whole. The images each frame encoded are in the report."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ...errors import ConfigError, expect
from ...model.plugins.alpamayo.decode import Sampling
from ...model.plugins.alpamayo.flow import FlowSettings
from ...model.plugins.alpamayo.reference import run_reference
from ..expert_serve.frame_inputs import FRAMES_PER_CAMERA, HISTORY_POSES, PromptText, inputs_from_rows, patchify
from .runner import AlpamayoSplit
from .vision_cache import VisionCache

REASONING_TOKENS = 16          # decode up to this many tokens per frame (the release's 256: minutes per cut)
GUIDANCE_WEIGHT = 2.0          # 1.5's classifier-free guidance, when its config sets none (1.0 = no guidance)
IMAGE_SIDE = 32                # patch 16 x merge 2: one image token per image
TEXT = PromptText(system=tuple(range(10, 22)), user=tuple(range(50, 60)), route=(40, 41, 42))


def model_name(model) -> str:
    directory = getattr(model, "checkpoint_directory", None)
    return getattr(model, "preset_name", None) or (directory.name if directory is not None else "alpamayo")


def camera_set(model, index: int) -> list[np.ndarray]:
    rng = np.random.default_rng(index)
    return [rng.integers(0, 256, (IMAGE_SIDE, IMAGE_SIDE, 3), dtype=np.uint8) for _ in range(model.config.cameras)]


def synthetic_inputs(model, seq: int, route: bool):
    """Frame `seq`'s inputs (the module's docstring), each image keyed by its camera and set."""
    sets = {k: camera_set(model, k) for k in range(seq, seq + FRAMES_PER_CAMERA)}
    keys = tuple((c, k) for c in range(model.config.cameras) for k in sets)                 # camera-major
    images = [sets[k][c] for c, k in keys]
    t = np.arange(HISTORY_POSES) * 0.1
    yaw = 0.05 * t
    poses = np.stack([5.0 * t * np.cos(yaw), 5.0 * t * np.sin(yaw), yaw], -1)               # (16, 3)
    vision = model.config.vlm.vision_config
    return inputs_from_rows(model, [patchify(image, vision, None) for image in images], poses, TEXT, route, keys)


DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16"}


def guidance_cases(model) -> tuple[bool, ...]:
    """Without guidance always; with it where the release has it (1.5, route tokens in its config)."""
    cfg = model.config
    return (False, True) if cfg.model_type == "alpamayo1_5" and "route_start" in cfg.special_ids else (False,)


def flow_settings(model, guidance: bool) -> FlowSettings:
    released = FlowSettings.from_config(model.config.flow)
    weight = released.guidance_weight if released.guidance_weight != 1.0 else GUIDANCE_WEIGHT
    return FlowSettings(released.steps, weight if guidance else 1.0)


def difference(got, want) -> float:
    """The largest absolute difference of two results' trajectories; inf when their reasoning differs."""
    if got.tokens != want.tokens:
        return float("inf")
    return max(float((a.float() - b.float()).abs().max()) for a, b in
               ((got.xyz, want.xyz), (got.rotation, want.rotation), (got.actions, want.actions)))


def verify_split(model, frames: int = 2, reasoning_tokens: int = REASONING_TOKENS) -> dict:
    """Split vs unsplit at every cut (the module's docstring); the report has verify_partitions' keys."""
    expect(frames >= 1 and reasoning_tokens >= 1, ConfigError,
           f"{frames} frame(s), {reasoning_tokens} reasoning token(s): the check needs at least one of each")
    sampling = Sampling(max_new_tokens=reasoning_tokens)
    cases = guidance_cases(model)
    runs = [(seq, guided, synthetic_inputs(model, seq, guided), flow_settings(model, guided))
            for seq in range(frames) for guided in cases]
    references = [run_reference(model, dataclasses.replace(inputs, image_keys=None), seq, sampling, flow, guided)
                  for seq, guided, inputs, flow in runs]
    results = []
    for p in range(model.num_blocks + 1):
        worst = {guided: 0.0 for guided in cases}
        vision, encoded = VisionCache(), []
        for (seq, guided, inputs, flow), reference in zip(runs, references):
            split = AlpamayoSplit(model, p, vision=vision).run(inputs, seq, sampling, flow, guided)
            worst[guided] = max(worst[guided], difference(split.result, reference))
            encoded.append(vision.encoded_total - sum(encoded))
        results.append({"partition": p, "max_abs_diff": max(worst.values()), "images_encoded": encoded,
                        "unguided_max_abs_diff": worst[False], **({"guided_max_abs_diff": worst[True]}
                                                                   if True in worst else {})})
    return {"preset": model_name(model), "family": model.config.model_type, "release": model.config.release,
            "num_blocks": model.num_blocks, "dtype": DTYPE_NAMES.get(model.expert_dtype, str(model.expert_dtype)), "placement": "cpu, both sides in this process",
            "frames": frames, "reasoning_tokens": reasoning_tokens, "flow_steps": runs[0][3].steps,
            "guidance": list(cases), "results": results,
            "encode_once": {"on": bool(vision.exact), "decided": vision.exact is not None, "why": vision.why},
            "max_abs_diff": max(r["max_abs_diff"] for r in results)}


def report_lines(r: dict) -> list[str]:
    """verify's text output for an Alpamayo model, in the layout it prints for the others."""
    cases = "without and with guidance" if True in r["guidance"] else "without guidance"
    lines = [f"{r['preset']} ({r['family']}, {r['num_blocks']} blocks, {r['dtype']}; decode up to "
             f"{r['reasoning_tokens']} tokens + {r['flow_steps']} expert steps, {cases})"]
    once = r["encode_once"]
    state = "on (a window's new images alone give their rows in the whole window to the bit)" if once["on"] else \
        f"{'off' if once['decided'] else 'undecided'} ({once['why']})"
    lines.append(f"  each image encoded once: {state}")
    for x in r["results"]:
        detail = f"  (no guidance {x['unguided_max_abs_diff']:.3e}, guidance {x['guided_max_abs_diff']:.3e})" \
            if "guided_max_abs_diff" in x else ""
        lines.append(f"  p={x['partition']:3d}  max_abs_diff={x['max_abs_diff']:.3e}{detail}  images encoded per "
                     f"run {x['images_encoded']}")
    return lines
