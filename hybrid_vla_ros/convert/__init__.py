"""Published driving-VLA checkpoints -> the package's checkpoint layout (`hybrid-vla convert`), ROS-free.

safe_load.py     pickle files read as tensors and plain containers only (torch's weights-only unpickler)
sources.py       the formats: plain / mmcv .pth, Lightning .ckpt, safetensors, OpenGVLab internvl_chat dirs
internvl_chat.py internvl_chat config and tensor names -> transformers' native InternVL
mapping.py       the per-model mapping file (renames, parts, drops, adapters, metadata); mappings/ ships them
route.py         every source key to exactly one place, or refused
write.py         the output directory, and its check against the model it describes
run.py           the whole conversion and its report
"""

from importlib import import_module

_WHERE = {"Mapping": "mapping", "load_mapping": "mapping", "shipped_mappings": "mapping", "Report": "run",
          "convert_checkpoint": "run", "load_pickled": "safe_load"}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    """Imported on first use: the CLI's parser reads the shipped mappings' names without importing torch."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_WHERE[name]}", __name__), name)
