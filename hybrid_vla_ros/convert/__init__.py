"""Published driving-VLA checkpoints -> the package's checkpoint layout (`hybrid-vla convert`), ROS-free.

safe_load.py     pickle files read as tensors and plain containers only (torch's weights-only unpickler)
sources.py       the formats: plain / mmcv .pth, Lightning .ckpt, safetensors, OpenGVLab internvl_chat dirs
internvl_chat.py internvl_chat config and tensor names -> transformers' native InternVL
mapping.py       the per-model mapping file (renames, parts, drops, adapters, metadata); mappings/ ships them
route.py         every source key to exactly one place, or refused
write.py         the output directory, and its check against the model it describes
run.py           the whole conversion and its report
"""

from ..lazy import lazy_attributes

_WHERE = {"Mapping": ".mapping:Mapping", "load_mapping": ".mapping:load_mapping",
          "shipped_mappings": ".mapping:shipped_mappings", "Report": ".run:Report",
          "convert_checkpoint": ".run:convert_checkpoint", "load_pickled": ".safe_load:load_pickled"}
__all__ = sorted(_WHERE)
# each name imported from its module on first use: the CLI's parser reads the shipped mappings' names without torch
__getattr__ = lazy_attributes(__name__, _WHERE)
