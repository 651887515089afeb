"""What the package ships by name, in one explicit table (vLLM's model table shape), each entry imported on first
use: the backbone families (a spec's `family`, model/families/) and the plugins (a spec's `scene_encoder` and
`head`, model/plugins/). Adding one = its module and one line here; test/test_house.py reads every entry as an
import edge of this module (layers, circles).

A plugin may also come from outside (docs/CHECKPOINTS.md, "Writing your own scene encoder and head"):

- an installed package's entry point (`importlib.metadata`):

    [project.entry-points."hybrid_vla_ros.scene_encoders"]    my_encoder = "my_pkg.scene:MyEncoder"
    [project.entry-points."hybrid_vla_ros.heads"]             my_head = "my_pkg.heads:MyHead"

- a module path, `my_pkg.scene:MyEncoder` (any name with a ':'), imported at use from the Python path
  (sys.path, PYTHONPATH): for a runtime nobody can install a package into.

An entry point named like a shipped plugin is refused, naming both, whenever its group is looked up (it would
otherwise be silently shadowed by the shipped one). Every plugin, however found, must be a class subclassing its
group's base (SceneEncoder, plugins/scene_encoders.py; WaypointHead, plugins/heads.py) with a
`from_config(config: dict, hidden_size: int, spec)` classmethod; a scene encoder also `tokens_for(config)`. Its
weights travel as safetensors, never pickle.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

from ..errors import ConfigError, expect
from ..lazy import load

FAMILIES = "hybrid_vla_ros.families"
SCENE_ENCODERS = "hybrid_vla_ros.scene_encoders"
HEADS = "hybrid_vla_ros.heads"

# group -> name -> 'module:Class'. A family's key is its class's `name` (checked at first use).
_TABLE: dict[str, dict[str, str]] = {
    FAMILIES: {
        "internvl": "hybrid_vla_ros.model.families.internvl:InternVLFamily",
        "llava": "hybrid_vla_ros.model.families.llava:LlavaFamily",
        "qwen2_vl": "hybrid_vla_ros.model.families.qwen2_vl:Qwen2VLFamily",
        "qwen2_5_vl": "hybrid_vla_ros.model.families.qwen2_5_vl:Qwen2_5VLFamily",
        "qwen3_vl": "hybrid_vla_ros.model.families.qwen3_vl:Qwen3VLFamily",
        "scene_llama": "hybrid_vla_ros.model.families.scene_llm:SceneLlamaFamily",
        "scene_qwen2": "hybrid_vla_ros.model.families.scene_llm:SceneQwen2Family",
        "scene_qwen3": "hybrid_vla_ros.model.families.scene_llm:SceneQwen3Family",
    },
    SCENE_ENCODERS: {
        "query_scene": "hybrid_vla_ros.model.plugins.scene_encoders:QueryScene",
        "orion_front": "hybrid_vla_ros.model.plugins.orion_front.encoder:OrionFrontEnd",
    },
    HEADS: {
        "mlp": "hybrid_vla_ros.model.plugins.heads:MlpHead",
        "gru": "hybrid_vla_ros.model.plugins.heads:GruHead",
        "command_modes": "hybrid_vla_ros.model.plugins.driving_heads:CommandModesHead",
        "meta_decision": "hybrid_vla_ros.model.plugins.driving_heads:MetaDecisionHead",
        "route_speed": "hybrid_vla_ros.model.plugins.driving_heads:RouteSpeedHead",
        "ddim_planner": "hybrid_vla_ros.model.plugins.diffusion_head:DdimPlannerHead",
        "orion_vae": "hybrid_vla_ros.model.plugins.vae_planners:OrionVaeHead",
        "minddrive_vae": "hybrid_vla_ros.model.plugins.vae_planners:MindDriveVaeHead",
        "alpamayo_expert": "hybrid_vla_ros.model.plugins.alpamayo.head:AlpamayoExpertHead",
    },
}
# Each plugin group's base class and the methods a plugin must define itself.
_BASES = {SCENE_ENCODERS: ("hybrid_vla_ros.model.plugins.scene_encoders:SceneEncoder",
                           ("from_config", "tokens_for", "forward")),
          HEADS: ("hybrid_vla_ros.model.plugins.heads:WaypointHead", ("from_config", "forward"))}
_FAMILY_BASE = "hybrid_vla_ros.model.families.base:Family"
_FAMILIES: dict = {}   # name -> the one instance of the family
# (group, name, sys.path) -> the class: an entry-point scan costs tens of ms and the prompt layout asks per frame;
# a changed sys.path (another environment's packages) looks again.
_FOUND: dict[tuple, type] = {}


# ---- families ----------------------------------------------------------------------------------------------------
def family_names() -> tuple[str, ...]:
    return tuple(sorted(_TABLE[FAMILIES]))


def get_family(name: str):
    """The family named `name` (one instance per process), its module imported on first use."""
    expect(name in _TABLE[FAMILIES], ConfigError, f"family '{name}' is not one of {sorted(_TABLE[FAMILIES])}")
    if name not in _FAMILIES:
        cls = load(_TABLE[FAMILIES][name])
        expect(isinstance(cls, type) and issubclass(cls, load(_FAMILY_BASE)) and cls.name == name, ConfigError,
               f"{FAMILIES}: {name!r} ({_TABLE[FAMILIES][name]}) is not a Family named {name!r}")
        _FAMILIES[name] = cls()
    return _FAMILIES[name]


def family_of_model_type(model_type):
    """The family loading a config.json's `model_type` (every family's module imported), None if none does."""
    return next((f for f in map(get_family, family_names()) if model_type in f.model_types), None)


def supported_model_types() -> list[str]:
    return sorted(t for name in family_names() for t in get_family(name).model_types)


# ---- plugins -----------------------------------------------------------------------------------------------------
def _where(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _installed(group: str) -> dict:
    """The group's entry points; one named like a shipped plugin is refused, naming both."""
    found = {ep.name: ep for ep in entry_points(group=group)}
    for name in sorted(set(found) & set(_TABLE[group])):
        dist = getattr(found[name], "dist", None)
        raise ConfigError(
            f"{group}: plugin {name!r} is shipped with hybrid_vla_ros ({_TABLE[group][name]}) and also "
            f"installed as an entry point ({found[name].value}, package {dist.name if dist else '?'}); the shipped "
            f"one would be used silently. Rename the entry point (the name checkpoints give), or name the class "
            f"by its path ('{found[name].value}')")
    return found


def plugin_names(group: str) -> list[str]:
    return sorted(set(_TABLE[group]) | set(_installed(group)))


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
    if name in _TABLE[group]:
        return load(_TABLE[group][name]), "shipped"
    expect(name in installed, ConfigError,
           f"{group}: no plugin {name!r}; shipped: {sorted(_TABLE[group])}, installed (entry points): "
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
        return load(name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"{group}: plugin {name!r}: no module {exc.name!r} on the Python path (importing "
                          f"{module_name!r}; put its folder on PYTHONPATH): {exc}") from exc
    except AttributeError as exc:
        module = sys.modules.get(module_name)   # absent: the module itself raised it while importing
        expect(module is None, ConfigError, f"{group}: plugin {name!r}: module {module_name!r} "
                                            f"({getattr(module, '__file__', '?')}) has no {attribute!r}")
        raise ConfigError(f"{group}: plugin {name!r}: module {module_name!r} cannot be imported: "
                          f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - the user's module can fail in any way
        raise ConfigError(f"{group}: plugin {name!r}: module {module_name!r} cannot be imported: "
                          f"{type(exc).__name__}: {exc}") from exc


def _check_kind(group: str, name: str, cls, origin: str) -> None:
    where, own = _BASES[group]
    base = load(where)
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
