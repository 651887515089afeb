"""Where scene encoders and heads come from, by the name a spec or checkpoint gives (docs/CHECKPOINTS.md,
"Writing your own scene encoder and head"):

- a name shipped here (registered by decorator: `query_scene`; `mlp`, `gru`);
- an installed package's entry point (`importlib.metadata`):

    [project.entry-points."hybrid_vla_ros.scene_encoders"]    my_encoder = "my_pkg.scene:MyEncoder"
    [project.entry-points."hybrid_vla_ros.heads"]             my_head = "my_pkg.heads:MyHead"

- a module path, `my_pkg.scene:MyEncoder` (any name with a ':'), imported at use from the Python path
  (sys.path, PYTHONPATH): for a runtime nobody can install a package into.

An entry point named like a shipped plugin is refused, naming both, whenever its group is looked up (it would
otherwise be silently shadowed by the shipped one); so is a second registration of a shipped name. Every
plugin, however found, must be a class subclassing its group's base (SceneEncoder, scene_encoders.py;
WaypointHead, heads.py) with a `from_config(config: dict, hidden_size: int, spec)` classmethod; a scene encoder
also `tokens_for(config)`. Its weights travel as safetensors, never pickle.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points

from ...errors import ConfigError, expect

SCENE_ENCODERS = "hybrid_vla_ros.scene_encoders"
HEADS = "hybrid_vla_ros.heads"
_BUILTIN: dict[str, dict[str, type]] = {SCENE_ENCODERS: {}, HEADS: {}}
# Each group's base class and the methods a plugin must define itself. The bases live in modules that import
# this one, so they are looked up by name at use (the package has imported them by then).
_BASES = {SCENE_ENCODERS: (f"{__package__}.scene_encoders", "SceneEncoder", ("from_config", "tokens_for", "forward")),
          HEADS: (f"{__package__}.heads", "WaypointHead", ("from_config", "forward"))}
# (group, name, sys.path) -> the class: an entry-point scan costs tens of ms and the prompt layout asks per frame;
# a changed sys.path (another environment's packages) looks again.
_FOUND: dict[tuple, type] = {}


def _where(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def register(group: str, name: str):
    """Class decorator: a plugin shipped with this package under `name` in `group`."""
    def decorate(cls: type) -> type:
        taken = _BUILTIN[group].get(name)
        expect(taken is None, ConfigError,
               f"{group}: plugin {name!r} ({_where(cls)}) registered twice: {_where(taken) if taken else ''} "
               f"already has that name; give the new one another")
        expect(":" not in name, ConfigError, f"{group}: plugin {name!r}: a name with ':' is a module path")
        cls.plugin_name = name
        _BUILTIN[group][name] = cls
        return cls
    return decorate


def _installed(group: str) -> dict:
    """The group's entry points; one named like a shipped plugin is refused, naming both."""
    found = {ep.name: ep for ep in entry_points(group=group)}
    for name in sorted(set(found) & set(_BUILTIN[group])):
        dist = getattr(found[name], "dist", None)
        raise ConfigError(
            f"{group}: plugin {name!r} is shipped with hybrid_vla_ros ({_where(_BUILTIN[group][name])}) and also "
            f"installed as an entry point ({found[name].value}, package {dist.name if dist else '?'}); the shipped "
            f"one would be used silently. Rename the entry point (the name checkpoints give), or name the class "
            f"by its path ('{found[name].value}')")
    return found


def plugin_names(group: str) -> list[str]:
    return sorted(set(_BUILTIN[group]) | set(_installed(group)))


def plugin_class(group: str, name: str) -> type:
    """The class named `name` in `group`: a shipped one, an installed package's entry point, or a module path
    ('module:Class'); refused with the reason when there is none or it is not a plugin of the group."""
    key = (group, name, tuple(sys.path))
    if key in _FOUND:
        return _FOUND[key]
    if ":" in name:
        cls, origin = _by_path(group, name), name
    else:
        cls, origin = _by_name(group, name)
    _check_kind(group, name, cls, origin)
    cls.plugin_name = name
    _FOUND[key] = cls
    return cls


def _by_name(group: str, name: str) -> tuple[type, str]:
    installed = _installed(group)   # checked on every first look-up: a shadowed entry point is refused
    if name in _BUILTIN[group]:
        return _BUILTIN[group][name], "shipped"
    expect(name in installed, ConfigError,
           f"{group}: no plugin {name!r}; shipped: {sorted(_BUILTIN[group])}, installed (entry points): "
           f"{sorted(installed)}; or name a class by its module path, 'my_pkg.module:Class'")
    try:
        return installed[name].load(), installed[name].value
    except Exception as exc:  # noqa: BLE001 - a third party's import can fail in any way
        raise ConfigError(f"{group}: plugin {name!r} ({installed[name].value}) cannot be imported: "
                          f"{type(exc).__name__}: {exc}") from exc


def _by_path(group: str, name: str) -> type:
    module_name, _, attribute = name.partition(":")
    expect(module_name and attribute and ":" not in attribute, ConfigError,
           f"{group}: plugin {name!r}: a plugin path is 'package.module:Class'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"{group}: plugin {name!r}: no module {exc.name!r} on the Python path (importing "
                          f"{module_name!r}; put its folder on PYTHONPATH): {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - the user's module can fail in any way
        raise ConfigError(f"{group}: plugin {name!r}: module {module_name!r} cannot be imported: "
                          f"{type(exc).__name__}: {exc}") from exc
    found = module
    for part in attribute.split("."):
        expect(hasattr(found, part), ConfigError,
               f"{group}: plugin {name!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) has no "
               f"{attribute!r}")
        found = getattr(found, part)
    return found


def _check_kind(group: str, name: str, cls, origin: str) -> None:
    module, base_name, own = _BASES[group]
    base = getattr(importlib.import_module(module), base_name)
    expect(isinstance(cls, type) and issubclass(cls, base), ConfigError,
           f"{group}: plugin {name!r} ({origin}) is {cls!r}, not a subclass of {_where(base)}")
    missing = [m for m in own if not _defines(cls, base, m)]
    expect(not missing, ConfigError,
           f"{group}: plugin {name!r} ({origin}, {_where(cls)}) does not define {missing} (docs/CHECKPOINTS.md, "
           f"\"Writing your own scene encoder and head\")")


def _defines(cls: type, base: type, method: str) -> bool:
    """`method` is defined by cls or a class between it and base (not inherited from base or above)."""
    for klass in cls.__mro__:
        if klass is base:
            return False
        if method in vars(klass):
            return True
    return False
