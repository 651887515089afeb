"""What a waypoint head reads besides its query tokens' states, and what it gives back (issue 38, item 2).

A head declares `side_inputs` (heads.py WaypointHead); each is handed to its forward as a keyword argument:

    sequence       (B, P, S, H)  every token's final normed hidden state, every pass (ReCogDrive's planner reads the
                                 whole sequence; MindDrive's decision reads one named position of one pass)
    sequence_mean  (B, P, H)     its mean over the S tokens (a pooled summary)
    noise_seed     int           a seed fixed by the frame's stamp and the head's config `seed`: a sampling head
                                 (DDIM) draws its noise from torch.Generator().manual_seed(noise_seed), so the split
                                 and the unsplit model, and every replay of a bag, draw the same noise
    any name of context.CONTEXT_TENSORS  (B, ...) the frame context's tensor (FrameContext.as_tensors, intrinsics
                                 scaled to the model's input size), in the head's dtype: e.g. command (B, 7) one-hot
                                 over NAV_COMMANDS, ego_status (B, 4), history (B, N, 3), target_point (B, 2)

A frame without a context (an engine run on synthetic frames, a graph whose model declares no context) hands
the unknown values: zeros (identity matrices) with their `*_known` masks 0, one per camera of the model; the
history has the poses the context holds (none without one): a head reading it pads to its own count
(diffusion_head.py does). A head returns the raw steps (B, N, 4), or a dict with
`waypoints` (B, N, 4) and named extras (tensors of batch B, or strings) that the trajectory reports
(types.Trajectory.extras; the suffix's ~/debug/trajectory_info as `head_<name>`).

One call path (VLAModel.run_head) serves the suffix stage (whole and chunked frames), the reference forward and
verify: the split and the unsplit model hand a head the very same tensors.
"""

from __future__ import annotations

import torch

from ...context import CONTEXT_TENSORS, FrameContext
from ...errors import ConfigError, expect, expect_finite

SEQUENCE_INPUTS = ("sequence", "sequence_mean", "noise_seed")
SIDE_INPUTS = SEQUENCE_INPUTS + CONTEXT_TENSORS


def check_side_inputs(plugin, known=SIDE_INPUTS) -> None:
    """A plugin's side_inputs must be names it can be handed (a head: SIDE_INPUTS; a scene encoder: the context's)."""
    names = getattr(plugin, "side_inputs", ())
    unknown = [n for n in names if n not in known]
    expect(isinstance(names, (tuple, list)) and not unknown, ConfigError,
           f"plugin {getattr(plugin, 'plugin_name', type(plugin).__name__)!r}: side_inputs {list(unknown) or names!r} "
           f"not known; it may read {list(known)} (model/plugins/head_inputs.py)")


def reads_sequence(head) -> bool:
    """Whether the head needs every token's final state (a chunked frame's suffix then keeps each chunk's rows)."""
    return any(n in ("sequence", "sequence_mean") for n in getattr(head, "side_inputs", ()))


def noise_seed(head, stamp_ns: int) -> int:
    return (int(getattr(head, "config", {}).get("seed", 0)) * 1_000_003 + int(stamp_ns)) % (2 ** 63)


def side_inputs(head, hidden: torch.Tensor, context, stamp_ns: int, image_size: tuple[int, int],
                num_cameras: int = 0) -> dict:
    """hidden (P, S, H): the frame's final normed rows -> the keyword arguments the head declared (per-camera
    tensors for num_cameras cameras at least: those the context lacks are unknown)."""
    names = tuple(getattr(head, "side_inputs", ()))
    out: dict = {}
    if "sequence" in names:
        out["sequence"] = hidden.unsqueeze(0)                                          # (1, P, S, H)
    if "sequence_mean" in names:
        out["sequence_mean"] = hidden.mean(dim=1).unsqueeze(0)                        # (1, P, H)
    if "noise_seed" in names:
        out["noise_seed"] = noise_seed(head, stamp_ns)
    wanted = [n for n in names if n in CONTEXT_TENSORS]
    if wanted:
        dtype = next((p.dtype for p in head.parameters()), hidden.dtype)
        tensors = (context if context is not None else FrameContext()).as_tensors(image_size, num_cameras)
        out.update({n: tensors[n].unsqueeze(0).to(hidden.device, dtype) for n in wanted})   # (1, ...)
    return out


def split_output(out, head_name: str, where: str) -> tuple[torch.Tensor, dict]:
    """A head's return -> (raw steps (1, N, 4), extras as JSON-able values of the frame). A non-finite extra is
    refused like a non-finite waypoint (nonfinite_output)."""
    if isinstance(out, torch.Tensor):
        return out, {}
    expect(isinstance(out, dict) and isinstance(out.get("waypoints"), torch.Tensor), ConfigError,
           f"head {head_name!r} returned {type(out).__name__}: expected the raw steps (B, N, 4) or a dict with "
           f"'waypoints' (B, N, 4) and named extras")
    extras = {}
    for name, value in out.items():
        if name == "waypoints":
            continue
        if isinstance(value, torch.Tensor):                 # batch-first: this frame's row
            value = value.detach()
            if value.is_floating_point():
                expect_finite(value, "nonfinite_output", f"{where}: head extra {name!r}")
                value = value.float()
            value = value[0].cpu().tolist()
        elif isinstance(value, (list, tuple)):              # one value per batch row (labels)
            value = value[0]
        extras[name] = value
    return out["waypoints"], extras
