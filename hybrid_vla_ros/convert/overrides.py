"""`hybrid-vla convert --set KEY=VALUE`: a shipped mapping with only its sizes changed, without copying the file.

KEY is a dotted path into the mapping (`action_head.image_height`, `scene_encoder.config.det.num_query`,
`config_overrides.vocab_size`, `action_head.head_config.decision_tokens`); VALUE is read as YAML. Only a size may
be set: the key must already be in the mapping with an integer (not a boolean) or a list of integers, and the value
must be of the same kind. Anything else (a rename, a drop, a flag, a new key) is refused, naming the key: a
different layout is a different mapping file."""

from __future__ import annotations

import copy

import yaml

from ..errors import ConfigError, expect

SECTIONS = ("action_head", "scene_encoder", "config_overrides")


def _size(value) -> bool:
    """An integer that is not a boolean, or a non-empty list of them."""
    if isinstance(value, list):
        return bool(value) and all(_size(v) and not isinstance(v, list) for v in value)
    return isinstance(value, int) and not isinstance(value, bool)


def parse_set(text: str) -> tuple[str, object]:
    """'KEY=VALUE' -> (KEY, VALUE read as YAML)."""
    key, sep, value = text.partition("=")
    expect(bool(sep) and bool(key.strip()), ConfigError, f"--set {text!r}: expected KEY=VALUE (e.g. "
                                                        f"scene_encoder.config.det.num_query=12)")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: the value is not YAML ({exc})") from exc


def _where(raw: dict, key: str, source: str) -> tuple[dict, str]:
    """The dict holding the key's last part, and that part."""
    parts = key.split(".")
    expect(parts[0] in SECTIONS and len(parts) >= 2, ConfigError,
           f"mapping '{source}': --set {key}: only sizes under {', '.join(SECTIONS)} may be set")
    node = raw
    for i, part in enumerate(parts[:-1]):
        node = node.get(part) if isinstance(node, dict) else None
        expect(isinstance(node, dict), ConfigError,
               f"mapping '{source}': --set {key}: '{'.'.join(parts[:i + 1])}' is not a section of the mapping")
    expect(parts[-1] in node, ConfigError, f"mapping '{source}': --set {key}: no such key (only sizes the mapping "
                                           f"already states may be set)")
    return node, parts[-1]


def apply_sets(raw: dict, sets, source: str) -> dict:
    """The mapping's raw dict with each (KEY, VALUE) of `sets` applied (a copy; the sizes only, module docstring)."""
    out = copy.deepcopy(raw)
    for key, value in sets:
        node, last = _where(out, key, source)
        expect(_size(node[last]), ConfigError,
               f"mapping '{source}': --set {key}: it holds {node[last]!r}, not a size (an integer or a list of "
               f"integers); only sizes may be set")
        expect(_size(value) and isinstance(value, list) == isinstance(node[last], list), ConfigError,
               f"mapping '{source}': --set {key}={value!r}: expected "
               f"{'a list of integers' if isinstance(node[last], list) else 'an integer'}, as the mapping has")
        node[last] = value
    return out
