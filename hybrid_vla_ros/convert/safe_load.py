"""Reading a published checkpoint's tensors without ever running its pickle code.

`.pth` / `.pt` / `.ckpt` / `.bin` files are read with torch's weights-only unpickler (`weights_only=True`):
it rebuilds tensors, dicts, lists, tuples, strings and numbers, and refuses any other global (a class, a
function, a `__reduce__` to os.system) before anything is called. A refusal is a ConfigError naming the file
and the global the file asked for. Safetensors files are read as they are (no code in that format)."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import torch
from torch.serialization import load as _weights_only_load  # only ever called with weights_only=True (below)

from ..errors import ConfigError, expect

PICKLE_SUFFIXES = (".pth", ".pt", ".ckpt", ".bin")
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
_OPCODE = re.compile(r"Unsupported operand (\d+)")


def _refusal(path: Path, exc: Exception) -> ConfigError:
    """torch's weights-only failure -> our error: the file, and the global (or pickle opcode) it wanted. torch's
    own advice (load it again without the weights-only guard) is not passed on: that would run the file's code."""
    text = str(exc)
    found = _GLOBAL.search(text)
    if found:
        what = f"it asks for the global {found.group(1)!r}, which only code execution could provide"
    elif _OPCODE.search(text):
        what = f"it uses pickle opcode {_OPCODE.search(text).group(1)} the safe loader does not read"
    else:
        what = text.strip().splitlines()[-1][:200] if text.strip() else type(exc).__name__
    return ConfigError(f"checkpoint file '{path}' is refused: {what}. Only tensors and plain containers (dict, "
                       f"list, tuple, str, numbers) are read; its code is never run. Re-save the state dict alone "
                       f"(torch.save(model.state_dict(), ...)) or as safetensors in the environment that made it")


def load_pickled(path: str | Path) -> object:
    """A torch-saved file -> its object (tensors + plain containers only), on the CPU."""
    path = Path(path)
    expect(path.is_file(), ConfigError, f"checkpoint file '{path}': no such file")
    mmap = zipfile.is_zipfile(path)   # torch's zip format maps tensors in place of reading them all
    try:
        return _weights_only_load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
    except (RuntimeError, ValueError, EOFError, OSError, AttributeError, TypeError) as exc:
        raise _refusal(path, exc) from exc
    except Exception as exc:  # pickle.UnpicklingError (not a RuntimeError): same refusal
        if type(exc).__name__ != "UnpicklingError":
            raise
        raise _refusal(path, exc) from exc


def load_safetensors(paths) -> dict[str, torch.Tensor]:
    """Every tensor of the given safetensors files (one key in two files is refused)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    out: dict[str, torch.Tensor] = {}
    for path in paths:
        try:
            tensors = load_file(str(path))
        except (SafetensorError, OSError) as exc:
            raise ConfigError(f"checkpoint file '{path}' is corrupt or unreadable ({exc})") from exc
        twice = sorted(set(tensors) & set(out))
        expect(not twice, ConfigError, f"checkpoint file '{path}': tensors {twice[:3]} are also in another file")
        out.update(tensors)
    return out


def unwrap(obj: object, path: Path, keys) -> tuple[dict, dict]:
    """A loaded checkpoint -> (its state dict, the rest at the top level). `keys` are wrapper keys tried in
    order (mmcv and Lightning: `state_dict`); a plain state dict is taken as it is."""
    expect(isinstance(obj, dict), ConfigError,
           f"checkpoint file '{path}': holds a {type(obj).__name__}, expected a dict (a state dict or a wrapper)")
    for key in keys:
        if isinstance(obj.get(key), dict):
            return obj[key], {k: v for k, v in obj.items() if k != key}
    return obj, {}


def tensors_only(state: dict, path: Path) -> dict[str, torch.Tensor]:
    """The state dict's tensors; a non-tensor entry is refused, naming it."""
    bad = sorted(k for k, v in state.items() if not isinstance(v, torch.Tensor))
    expect(not bad, ConfigError,
           f"checkpoint file '{path}': entries {bad[:5]} are not tensors (expected a flat state dict: "
           f"name -> tensor; name the wrapper key with the mapping's `unwrap`)")
    return dict(state)
