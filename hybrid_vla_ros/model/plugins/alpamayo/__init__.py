"""NVIDIA's Alpamayo 1 (R1), 1.5 and 2 Super, ROS-free: a Qwen3-VL VLM that decodes its reasoning, then a flow-matching
action expert whose layer i attends to the VLM's layer-i keys/values (docs in each module, cited to the published
code). Read the released layout (release.py), run it unsplit (reference.py; engine/expert_split runs it split
at a cut); `alpamayo_expert` (head.py) sizes the expert as a head for the `alpamayo-r1-like` preset.

config.py        config.json -> the VLM's, the expert's, the action space's and the sampler's settings
config_super.py  Alpamayo 2 Super's config.json in config.py's fields
model.py         the module tree under the released tensor names
expert.py        the expert and its positions and mask over the VLM's cache
action_proj.py   action_in_proj (Fourier time conditioning), action_out_proj
action_space.py  unicycle (acceleration, curvature) actions -> x, y, heading
flow.py          seeded Euler flow matching, classifier-free guidance
decode.py        prefill and the sampled reasoning decode
reference.py     the whole frame unsplit, with checks of its inputs; the ego history's prompt tokens, the
                 unguided (route-free) prompt
release.py       a released directory -> the model
head.py          the expert as a waypoint-head plugin (presets, `hybrid-vla info`)
tiny.py          the tiny R1 / 1.5 presets (seeded toy Qwen3-VL, the releases' vocabulary layout)
"""

from ....lazy import lazy_attributes

_WHERE = {"RELEASES": ".config:RELEASES", "AlpamayoConfig": ".config:AlpamayoConfig",
          "is_release": ".config:is_release", "parse": ".config:parse", "Sampling": ".decode:Sampling",
          "FlowSettings": ".flow:FlowSettings", "AlpamayoModel": ".model:AlpamayoModel",
          "AlpamayoInputs": ".reference:AlpamayoInputs", "AlpamayoResult": ".reference:AlpamayoResult",
          "check_inputs": ".reference:check_inputs", "run_reference": ".reference:run_reference",
          "build": ".release:build", "load_release": ".release:load_release"}
__all__ = sorted(_WHERE)
# each name imported from its module on first use: importing the package, or one of its modules, loads no other
__getattr__ = lazy_attributes(__name__, _WHERE)
