"""A released Alpamayo directory -> AlpamayoModel, offline, safetensors only:

    config.json                          model_type alpamayo_r1 / alpamayo1_5 and the release's fields (config.py)
    model.safetensors                    or model-0000X-of-0000N.safetensors + model.safetensors.index.json
    <vlm_name_or_path>/config.json       optional: the backbone's Qwen3-VL config, when it names a local folder
    tokenizer.json, tokenizer_config.json  optional, here or in that folder: extended as the authors' code extends
                                         it, each of its trajectory, special and vision tokens must have the id
                                         config.json implies (refused at load naming the first that differs)

Every tensor the config implies must be there in its shape; a tensor the model has no place for is refused
(a different architecture would otherwise load half-read). The model is built on the meta device and each
parameter read straight into the wanted dtype; buffers (rotary tables, Fourier frequencies, the action space's
statistics) are computed from the config and replaced by the file's where it has them."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ....errors import ConfigError, expect
from ...checkpoint_files import _opened, _weight_map, read_tensor, release_freed_heap
from ...seeded import parameters_on_meta
from .config import TRAJ_TOKENS, parse, read_json, special_tokens, vlm_directory
from .model import AlpamayoModel

SHOWN = 5   # keys named in an error message


def build(config, meta: bool = True) -> AlpamayoModel:
    """The model of a parsed config; parameters on the meta device unless `meta` is False (seeded init)."""
    if not meta:
        return AlpamayoModel(config)
    with parameters_on_meta():
        return AlpamayoModel(config)


def _check_keys(model: AlpamayoModel, weight_map: dict, directory: Path) -> None:
    params = {model.file_key(name) for name, _ in model.named_parameters()}
    missing = sorted(params - set(weight_map))
    expect(not missing, ConfigError,
           f"Alpamayo checkpoint '{directory}': {len(missing)} tensors the config implies are in no safetensors "
           f"file, e.g. {missing[:SHOWN]}")
    unknown = sorted(set(weight_map) - model.published_keys())
    expect(not unknown, ConfigError,
           f"Alpamayo checkpoint '{directory}': {len(unknown)} tensors have no place in the model its config.json "
           f"describes, e.g. {unknown[:SHOWN]} (another architecture or a different expert_cfg?)")


def _set(model: nn.Module, name: str, tensor: torch.Tensor, parameter: bool) -> None:
    path, _, leaf = name.rpartition(".")
    owner = model.get_submodule(path)
    if parameter:
        owner._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)
    else:
        owner._buffers[leaf] = tensor


def read_more(model: AlpamayoModel, reads, dtype: torch.dtype = torch.float32, device=None) -> int:
    """Read the parameters reads(name) selects that are still on the meta device, in `dtype`, and the saved
    buffers not read yet, as stored (the action space's statistics stay fp32). device (a GPU prefix): each tensor
    moved there as it is read, and every buffer with it (rotary tables, Fourier frequencies); never the module
    (the other side's parameters stay on the meta device). -> parameters read."""
    weight_map = model.weight_map
    entries = [(n, p, True) for n, p in model.named_parameters() if p.is_meta and reads(n)]
    done = getattr(model, "buffers_read", False)
    entries += [] if done else [(n, b, False) for n, b in model.named_buffers() if n in weight_map]
    for name, current, parameter in entries:
        path = weight_map[name]
        with _opened(path) as handle:
            wanted = dtype if parameter else current.dtype
            tensor = read_tensor(handle, path, model.file_key(name), current, wanted)
            _set(model, name, tensor.to(device), parameter)
        release_freed_heap()   # the read's temporaries given back before the next (model/checkpoint_files.py)
    model.buffers_read = True
    if device is not None:
        for name, buffer in list(model.named_buffers()):
            if not buffer.is_meta and buffer.device != torch.device(device):
                _set(model, name, buffer.to(device), False)
    return sum(parameter for *_, parameter in entries)


def load_release(directory, dtype: torch.dtype = torch.float32, shapes_only: bool = False,
                 reads=None) -> AlpamayoModel:
    """The model of a released Alpamayo directory (ConfigError with the reason when it is not one). reads(name)
    -> bool: read only those parameters (one side of a cut: engine/expert_split/sides.py), the rest stays on the
    meta device; read_more adds others later."""
    directory = Path(directory)
    expect(directory.is_dir(), ConfigError, f"Alpamayo checkpoint '{directory}': no such directory")
    config = parse(read_json(directory / "config.json"), directory)
    check_tokenizer(config, directory)
    weight_map = _weight_map(directory)
    model = build(config)
    expect(model.vlm.lm_head.weight is not model.vlm.model.language_model.embed_tokens.weight, ConfigError,
           f"Alpamayo checkpoint '{directory}': the backbone ties lm_head to the token embeddings; the released "
           f"Qwen3-VL-8B does not, and reading one side of a tied release is not supported")
    _check_keys(model, weight_map, directory)
    for name, param in list(model.named_parameters()):   # unread ones in `dtype` too: a side's dtype is its own
        _set(model, name, torch.empty_like(param, dtype=dtype, device="meta"), True)
    names = [name for name in model.state_dict() if model.file_key(name) in weight_map]
    model.checkpoint_directory = directory
    model.weight_map = {name: weight_map[model.file_key(name)] for name in names}   # our names -> their files
    if not shapes_only:
        read_more(model, reads or (lambda name: True), dtype)
    return model.eval()


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
VISION_TOKENS = {"<|vision_start|>": "vision_start_token_id", "<|vision_end|>": "vision_end_token_id",
                 "<|image_pad|>": "image_token_id", "<|video_pad|>": "video_token_id"}


def tokenizer_directory(config, directory: Path) -> Path | None:
    """The release's own tokenizer, else the backbone's local folder's (the processor the authors' code loads)."""
    for folder in (directory, vlm_directory(config.raw, directory)):
        if folder is not None and any((folder / name).is_file() for name in TOKENIZER_FILES):
            return folder
    return None


def extend_as_released(tokenizer, config) -> None:
    """The tokens the releases' code adds to the backbone's tokenizer (base_model.py _build_tokenizer): <i0> ..,
    then every special token (add_special_tokens) or the trajectory ones; a token it already has keeps its id."""
    tokenizer.add_tokens([f"<i{v}>" for v in range(config.traj_vocab_size)])
    names = list(special_tokens(config.model_type).values()) if config.special_ids else \
        [f"<|traj_{k}|>" for k in TRAJ_TOKENS]
    tokenizer.add_tokens(names, special_tokens=True)


def implied_ids(config) -> dict:
    """Token text -> the id config.json implies for it (the backbone's vision tokens from its config)."""
    vlm, last = config.vlm, config.traj_vocab_size - 1
    ids = {token: int(getattr(vlm, field)) for token, field in VISION_TOKENS.items()
           if getattr(vlm, field, None) is not None}
    ids.update({"<i0>": config.traj_token_start_idx, f"<i{last}>": config.traj_token_start_idx + last})
    ids.update({f"<|traj_{k}|>": v for k, v in config.traj_token_ids.items()})
    names = special_tokens(config.model_type)
    ids.update({names[k]: v for k, v in config.special_ids.items() if k != "image_pad"})
    return ids


def release_tokenizer(config, directory: Path):
    """The release's tokenizer extended as the authors' code extends it (None when the release has none)."""
    folder = tokenizer_directory(config, Path(directory))
    if folder is None:
        return None
    from transformers import AutoTokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:   # noqa: BLE001 (a missing tokenizer package, an unknown class: one line)
        raise ConfigError(f"Alpamayo checkpoint '{directory}': the tokenizer in '{folder}' cannot be loaded "
                          f"({exc})") from None
    extend_as_released(tokenizer, config)
    return tokenizer


def check_tokenizer(config, directory: Path) -> None:
    """A tokenizer beside the release (or its backbone) whose tokens disagree with config.json: ConfigError naming
    the token (the prompts' ids would not be the tokens the release was trained on)."""
    tokenizer = release_tokenizer(config, directory)
    if tokenizer is None:
        return
    where = f"Alpamayo checkpoint '{directory}': the tokenizer in '{tokenizer_directory(config, Path(directory))}'"
    for token, wanted in implied_ids(config).items():
        got = tokenizer.convert_tokens_to_ids(token)
        expect(got == wanted, ConfigError, f"{where} gives {token} the id {got}, config.json implies {wanted} "
               f"(vocab_size, traj_token_start_idx, traj_token_ids and the backbone's token ids); refused")
    padded = -(-len(tokenizer) // 128) * 128 if config.model_type == "alpamayo2_super" else len(tokenizer)
    expect(padded == config.vocab_size, ConfigError,
           f"{where} has {len(tokenizer)} tokens with the release's added, config.json's vocab_size is "
           f"{config.vocab_size}{' (padded to 128)' if padded != len(tokenizer) else ''}; refused")
