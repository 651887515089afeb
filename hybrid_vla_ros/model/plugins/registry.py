"""Where scene encoders and heads come from: the ones shipped here (registered by decorator) and those of
installed packages, found through Python entry points (`importlib.metadata`):

    [project.entry-points."hybrid_vla_ros.scene_encoders"]    my_encoder = "my_pkg.scene:MyEncoder"
    [project.entry-points."hybrid_vla_ros.heads"]             my_head = "my_pkg.heads:MyHead"

A plugin is an nn.Module class with `from_config(config: dict, hidden_size: int, spec) -> instance` and a
JSON-able `config` attribute; its weights travel as safetensors, never pickle (docs/CHECKPOINTS.md). The
interfaces are in scene_encoders.py (SceneEncoder) and heads.py (WaypointHead).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from ...errors import ConfigError, expect

SCENE_ENCODERS = "hybrid_vla_ros.scene_encoders"
HEADS = "hybrid_vla_ros.heads"
_BUILTIN: dict[str, dict[str, type]] = {SCENE_ENCODERS: {}, HEADS: {}}


def register(group: str, name: str):
    """Class decorator: a plugin shipped with this package under `name` in `group`."""
    def decorate(cls: type) -> type:
        expect(name not in _BUILTIN[group], ConfigError, f"{group}: plugin {name!r} registered twice")
        cls.plugin_name = name
        _BUILTIN[group][name] = cls
        return cls
    return decorate


def _installed(group: str) -> dict:
    return {ep.name: ep for ep in entry_points(group=group)}


def plugin_names(group: str) -> list[str]:
    return sorted(set(_BUILTIN[group]) | set(_installed(group)))


def plugin_class(group: str, name: str) -> type:
    """The class named `name` in `group`: a shipped one, else an installed package's entry point."""
    if name in _BUILTIN[group]:
        return _BUILTIN[group][name]
    installed = _installed(group)
    expect(name in installed, ConfigError,
           f"{group}: no plugin {name!r}; shipped: {sorted(_BUILTIN[group])}, installed (entry points): "
           f"{sorted(installed)}")
    try:
        cls = installed[name].load()
    except Exception as exc:  # noqa: BLE001 - a third party's import can fail in any way
        raise ConfigError(f"{group}: plugin {name!r} ({installed[name].value}) cannot be imported: "
                          f"{type(exc).__name__}: {exc}") from exc
    expect(callable(getattr(cls, "from_config", None)), ConfigError,
           f"{group}: plugin {name!r} ({installed[name].value}) has no from_config(config, hidden_size, spec)")
    cls.plugin_name = name
    return cls
