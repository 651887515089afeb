"""A mapping file: how one published checkpoint's tensors become the package's layout (docs/CHECKPOINTS.md,
"Converting a published checkpoint"). YAML or JSON:

    format: hybrid_vla_convert/1
    name: my-model
    provenance: where every key name below comes from (repo, path, commit), and whether a real
                checkpoint was converted with it
    unwrap: [state_dict]             wrapper keys holding the state dict, tried in order (default: per --from)
    rename:                          regexes applied in order to every key (re.sub, all matches)
      - ['^module\\.', '']
    drop:                            keys dropped on purpose (regexes, matched after the renames), counted
      - '^pts_bbox_head\\.'
    squeeze:                         renamed keys whose leading size-1 dims are dropped down to 2 dims ((1, n, H) -> (n, H))
      - '^prompt\\.queries\\.'
    parts:                           first matching prefix wins and is removed from the key
      - {prefix: 'llm.', to: backbone}            -> model.safetensors (+ config.json from --config)
      - {prefix: 'planner.', to: action_head}     -> action_head.safetensors
      - {prefix: 'front.', to: scene_encoder}     -> scene_encoder.safetensors
      - {prefix: 'prompt.', to: prompt_embeddings} -> prompt_embeddings.safetensors
    backbone_layout: internvl_chat   the backbone's names are OpenGVLab's remote-code ones (internvl_chat.py converts
                                     them, and an internvl_chat config.json from --config)
    adapters: {lora_alpha: 16}       peft LoRA keys `<module>.lora_A.<adapter>.weight` -> adapters/<adapter>/;
                                     with `merge: true` (a one-pass model's LoRA) added into the base weights instead:
                                     W + lora_alpha / r * B @ A, in float64, stored in W's dtype
    action_head: {...}               the head file's `hybrid_vla` metadata (docs/CHECKPOINTS.md, Layout)
    scene_encoder: {plugin: NAME, config: {...}}
    config_overrides: {...}          set in the backbone's config.json after it is copied / converted

A key that no part takes and no drop rule names is refused, naming it: nothing is lost silently."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import ConfigError, expect

FORMAT = "hybrid_vla_convert/1"
PARTS = ("backbone", "action_head", "scene_encoder", "prompt_embeddings")
LAYOUTS = ("internvl_chat",)   # backbone_layout: a source naming its backbone otherwise than transformers
FORMATS = ("pth", "ckpt", "safetensors", "internvl_chat")   # --from (sources.py reads each)
MAPPINGS_DIR = Path(__file__).resolve().parent / "mappings"
KNOWN = ("format", "name", "provenance", "verified", "unwrap", "rename", "drop", "squeeze", "parts", "adapters",
         "action_head", "scene_encoder", "config_overrides", "backbone_layout")
# peft's multi-adapter names: <module>.lora_A.<adapter>.weight (and lora_B); a LoRA key of any other shape
# (lora_embedding_*, DoRA's lora_magnitude_vector) is not an adapter this package applies
LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<ab>[AB])\.(?P<adapter>[^.]+)\.weight$")


@dataclass
class Mapping:
    name: str
    source: str                                   # the file it was read from
    provenance: str = ""
    unwrap: list | None = None
    rename: list = field(default_factory=list)    # [(compiled regex, replacement)]
    drop: list = field(default_factory=list)      # [compiled regex]
    parts: list = field(default_factory=list)     # [(prefix, part)]
    adapters: dict | None = None
    action_head: dict | None = None
    scene_encoder: dict | None = None
    config_overrides: dict = field(default_factory=dict)
    squeeze: list = field(default_factory=list)   # [compiled regex]
    backbone_layout: str | None = None

    @property
    def merge_adapters(self) -> bool:
        return bool(self.adapters and self.adapters.get("merge"))

    def shaped(self, key: str, tensor):
        """A renamed key's tensor with its leading size-1 dims dropped when a squeeze rule names it."""
        if any(p.search(key) for p in self.squeeze):
            while tensor.dim() > 2 and tensor.shape[0] == 1:
                tensor = tensor[0]
        return tensor

    def renamed(self, key: str) -> str:
        for pattern, replacement in self.rename:
            key = pattern.sub(replacement, key)
        return key

    def dropped(self, key: str) -> bool:
        return any(p.search(key) for p in self.drop)

    def part_of(self, key: str) -> tuple[str, str] | None:
        """A renamed key -> (part, its name there), or None when no part takes it."""
        for prefix, part in self.parts:
            if key.startswith(prefix):
                return part, key[len(prefix):]
        return None


def shipped_mappings() -> list[str]:
    return sorted(p.stem for p in MAPPINGS_DIR.glob("*.yaml")) if MAPPINGS_DIR.is_dir() else []


def _compile(pattern, where: str):
    expect(isinstance(pattern, str), ConfigError, f"{where}: {pattern!r} is not a regex string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"{where}: {pattern!r} is not a valid regex ({exc})") from exc


def _read(name_or_path: str) -> tuple[dict, Path]:
    path = Path(name_or_path)
    if not path.is_file():
        expect("/" not in name_or_path and name_or_path in shipped_mappings(), ConfigError,
               f"mapping {name_or_path!r}: no such file and no shipped mapping of that name (shipped: "
               f"{', '.join(shipped_mappings()) or 'none'})")
        path = MAPPINGS_DIR / f"{name_or_path}.yaml"
    try:
        raw = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"mapping '{path}': not valid {path.suffix[1:] or 'YAML'} ({exc})") from exc
    expect(isinstance(raw, dict), ConfigError, f"mapping '{path}': expected a mapping at the top level")
    expect(raw.get("format") == FORMAT, ConfigError,
           f"mapping '{path}': format {raw.get('format')!r}, expected {FORMAT!r}")
    unknown = sorted(set(raw) - set(KNOWN))
    expect(not unknown, ConfigError, f"mapping '{path}': unknown fields {unknown}; known: {list(KNOWN)}")
    return raw, path


def _rules(raw: dict, path: Path) -> tuple[list, list, list]:
    rename = []
    for i, rule in enumerate(raw.get("rename") or []):
        expect(isinstance(rule, (list, tuple)) and len(rule) == 2 and isinstance(rule[1], str), ConfigError,
               f"mapping '{path}': rename[{i}] = {rule!r}, expected [regex, replacement]")
        rename.append((_compile(rule[0], f"mapping '{path}': rename[{i}]"), rule[1]))
    drop = [_compile(p, f"mapping '{path}': drop[{i}]") for i, p in enumerate(raw.get("drop") or [])]
    parts = []
    for i, rule in enumerate(raw.get("parts") or []):
        expect(isinstance(rule, dict) and isinstance(rule.get("prefix"), str) and rule.get("to") in PARTS,
               ConfigError, f"mapping '{path}': parts[{i}] = {rule!r}, expected {{prefix: STR, to: one of "
                            f"{list(PARTS)}}}")
        parts.append((rule["prefix"], rule["to"]))
    expect(bool(parts), ConfigError, f"mapping '{path}': no parts (which keys go to the backbone, head, ...)")
    return rename, drop, parts


def _section(raw: dict, name: str, path: Path) -> dict | None:
    value = raw.get(name)
    expect(value is None or isinstance(value, dict), ConfigError,
           f"mapping '{path}': {name} must be a mapping, got {type(value).__name__}")
    return value


def load_mapping(name_or_path: str, sets=()) -> Mapping:
    """A shipped mapping by name (hybrid_vla_ros/convert/mappings/NAME.yaml) or a file, checked; `sets`:
    [(dotted key, value)] of sizes changed (overrides.py, `convert --set`)."""
    raw, path = _read(str(name_or_path))
    if sets:
        from .overrides import apply_sets
        raw = apply_sets(raw, sets, str(path))
    rename, drop, parts = _rules(raw, path)
    unwrap = raw.get("unwrap")
    expect(unwrap is None or (isinstance(unwrap, list) and all(isinstance(k, str) for k in unwrap)), ConfigError,
           f"mapping '{path}': unwrap must be a list of key names")
    adapters = _section(raw, "adapters", path)
    expect(adapters is None or isinstance(adapters.get("lora_alpha"), (int, float)), ConfigError,
           f"mapping '{path}': adapters needs lora_alpha (a number; rank and targets are read from the tensors)")
    expect(adapters is None or isinstance(adapters.get("merge", False), bool), ConfigError,
           f"mapping '{path}': adapters.merge must be true or false")
    layout = raw.get("backbone_layout")
    expect(layout is None or layout in LAYOUTS, ConfigError,
           f"mapping '{path}': backbone_layout {layout!r}, known: {list(LAYOUTS)}")
    squeeze = [_compile(p, f"mapping '{path}': squeeze[{i}]") for i, p in enumerate(raw.get("squeeze") or [])]
    scene = _section(raw, "scene_encoder", path)
    expect(scene is None or (isinstance(scene.get("plugin"), str) and isinstance(scene.get("config", {}), dict)),
           ConfigError, f"mapping '{path}': scene_encoder needs plugin (a name) and config (a mapping)")
    return Mapping(name=str(raw.get("name") or path.stem), source=str(path), provenance=str(raw.get("provenance", "")),
                   unwrap=unwrap, rename=rename, drop=drop, parts=parts, adapters=adapters,
                   action_head=_section(raw, "action_head", path), scene_encoder=scene,
                   config_overrides=_section(raw, "config_overrides", path) or {}, squeeze=squeeze,
                   backbone_layout=layout)
