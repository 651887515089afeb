"""NVIDIA's Alpamayo 1 (R1) and 1.5, ROS-free: a Qwen3-VL VLM that decodes its reasoning, then a flow-matching
action expert whose layer i attends to the VLM's layer-i keys/values (docs in each module, cited to the published
code). Read the released layout (release.py), run it unsplit (reference.py; engine/expert_split runs it split
at a cut); `alpamayo_expert` (head.py) sizes the expert as a head for the `alpamayo-r1-like` preset.

config.py        config.json -> the VLM's, the expert's, the action space's and the sampler's settings
model.py         the module tree under the released tensor names
expert.py        the expert and its positions and mask over the VLM's cache
action_proj.py   action_in_proj (Fourier time conditioning), action_out_proj
action_space.py  unicycle (acceleration, curvature) actions -> x, y, heading
flow.py          seeded Euler flow matching, classifier-free guidance
history.py       the ego history's 48 prompt tokens; the unguided (route-free) prompt
decode.py        prefill and the sampled reasoning decode
reference.py     the whole frame unsplit, with checks of its inputs
release.py       a released directory -> the model
head.py          the expert as a waypoint-head plugin (presets, `hybrid-vla info`)
"""

from importlib import import_module

from . import head  # noqa: F401  (registers the `alpamayo_expert` head; imports nothing above plugins/)

_WHERE = {"RELEASES": "config", "AlpamayoConfig": "config", "is_release": "config", "parse": "config",
          "Sampling": "decode", "FlowSettings": "flow", "AlpamayoModel": "model", "AlpamayoInputs": "reference",
          "AlpamayoResult": "reference", "check_inputs": "reference", "run_reference": "reference",
          "build": "release", "load_release": "release"}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    """Imported on first use: release.py reads checkpoints through model/checkpoint.py, which imports plugins/."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_WHERE[name]}", __name__), name)
