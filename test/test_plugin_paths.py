"""Plugins named by module path ('module:Class', imported at use), what a plugin receives (docs/CHECKPOINTS.md,
"Writing your own scene encoder and head"), and the names that are refused: a path that does not lead to a
plugin of the right kind, and an installed entry point named like a shipped plugin (it would be shadowed)."""

import ast
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from hybrid_vla_ros.engine.placement import Placement
from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import HEAD_FILE, SCENE_FILE, load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.inputs import encode_frame, synthetic_frame
from hybrid_vla_ros.model import registry
from hybrid_vla_ros.model.families import Family, family_names, get_family
from hybrid_vla_ros.model.plugins import HEADS, SCENE_ENCODERS, plugin_class, plugin_names
from hybrid_vla_ros.model.preprocess import preprocess
from hybrid_vla_ros.model.spec import VLASpec
from hybrid_vla_ros.model.presets import get_preset
from hybrid_vla_ros.model.tokenize.tokens import BOS, BYTE_OFFSET, IMAGE_TOKEN, PLAN, VISION_END, VISION_START
from hybrid_vla_ros.model.vla import build_model
from hybrid_vla_ros.types import EgoState, Frame

ENCODER, HEAD = "plugin_by_path:PooledScene", "plugin_by_path:SpyHead"


def by_path_spec(**changes) -> VLASpec:
    """tiny-scene (two passes with adapters, 2 query tokens each) with both plugins named by path."""
    fields = dict(name="by-path", scene_encoder=ENCODER, head=HEAD, scene_config={"grid": 2, "cameras": 2},
                  head_config={"note": "mine"})
    return dataclasses.replace(get_preset("tiny-scene"), **{**fields, **changes})


def test_plugins_named_by_path_are_served_exactly_and_the_checkpoint_names_them_so(tmp_path):
    model = build_model(by_path_spec())
    # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert verify_partitions(model, frames=2)["max_abs_diff"] == 0.0
    save_checkpoint(model, tmp_path / "ckpt")
    with safe_open(str(tmp_path / "ckpt" / SCENE_FILE), "pt") as f:
        assert f.metadata()["plugin"] == ENCODER and json.loads(f.metadata()["config"]) == {"grid": 2, "cameras": 2}
    with safe_open(str(tmp_path / "ckpt" / HEAD_FILE), "pt") as f:
        meta, keys = f.metadata(), set(f.keys())
    assert set(meta) == {"format", "hybrid_vla"}   # head, head_config, query_tokens, passes: inside the JSON
    vla = json.loads(meta["hybrid_vla"])
    assert vla["head"] == HEAD and vla["head_config"] == {"note": "mine"} and vla["query_tokens"] == 2
    assert [p["name"] for p in vla["passes"]] == ["decision", "action"]
    assert keys == {"proj.weight", "proj.bias"}     # the head module's own state_dict names
    loaded = load_checkpoint(tmp_path / "ckpt")
    assert loaded.spec == model.spec
    config, hidden, spec = loaded.action_head.received
    # from_config gets the spec's three fields (query tokens of every pass) and head_config; spec: the VLASpec
    assert config == {"num_waypoints": 8, "head_hidden": 32, "query_tokens": 4, "note": "mine"}
    assert hidden == 64 and isinstance(spec, VLASpec) and spec == loaded.spec
    frame = synthetic_frame(model.spec, 0)
    model.reset_memory("test")
    want = SuffixStage(model, 2).run(PrefixStage(model, 2).run(frame)).points
    got = SuffixStage(loaded, 2).run(PrefixStage(loaded, 2).run(frame)).points
    assert np.array_equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_what_a_scene_encoder_gets_the_spec_sized_normalised_images_and_the_ego_without_grad(dtype):
    model = build_model(by_path_spec())
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8), rng.integers(0, 256, (90, 60, 3), dtype=np.uint8)]
    frame = Frame(images=images, seq=3, stamp_ns=1_234_567, ego=EgoState(speed_mps=8.13, yaw_rate_rps=-0.02))
    if dtype != torch.float32:
        model = model.to(dtype)                    # as a checkpoint's prefix is read in its dtype
    PrefixStage(model, 2, Placement(prefix_dtype=dtype)).run(frame)
    seen = model.scene_encoder.seen
    assert seen["images"] == ((2, 3, 56, 56), dtype, torch.device("cpu"))      # the spec's size: no camera size
    assert seen["ego"] == ((2,), dtype, torch.device("cpu"))
    assert seen["stamp_ns"] == 1_234_567 and not seen["grad"] and seen["inference_mode"]
    pixels = preprocess(images, model.image_processing)                      # (x / 255 - CLIP mean) / CLIP std
    assert torch.equal(seen["pixels"], pixels.to(dtype))
    assert seen["ego_values"] == torch.tensor([8.13, -0.02]).to(dtype).tolist()


def test_a_plain_llm_without_tokenizer_files_gets_the_byte_layout_one_plan_token_per_query_token():
    model = build_model(by_path_spec())
    ids = encode_frame(synthetic_frame(model.spec, 0), model).input_ids         # (passes, S)
    n = model.image_tokens
    assert ids.shape[0] == 2                                                     # one row per pass
    for row in ids.tolist():
        assert row[:2] == [BOS, VISION_START] and row[2:2 + n] == [IMAGE_TOKEN] * n and row[2 + n] == VISION_END
        assert row[-2:] == [PLAN, PLAN] and all(t >= BYTE_OFFSET for t in row[3 + n:-2])  # text: byte tokens


@pytest.mark.parametrize("group, name, reason", [
    (SCENE_ENCODERS, "no_such_module_here:Scene", r"no module 'no_such_module_here' on the Python path"),
    (SCENE_ENCODERS, "plugin_by_path:Missing", r"module 'plugin_by_path' \(.*plugin_by_path.py\) has no 'Missing'"),
    (HEADS, "plugin_by_path:not_a_class", r"is <function not_a_class.*not a subclass of .*heads:WaypointHead"),
    (HEADS, "plugin_by_path:NotAPlugin", r"not a subclass of hybrid_vla_ros.model.plugins.heads:WaypointHead"),
    (SCENE_ENCODERS, HEAD, r"not a subclass of hybrid_vla_ros.model.plugins.scene_encoders:SceneEncoder"),
    (SCENE_ENCODERS, "plugin_by_path:NoTokensFor", r"does not define \['tokens_for'\]"),
    (HEADS, "plugin_by_path:", r"a plugin path is 'package.module:Class'"),
    (HEADS, ":SpyHead", r"a plugin path is 'package.module:Class'"),
])
def test_a_path_that_leads_to_no_plugin_of_the_group_is_refused_with_the_reason(group, name, reason):
    with pytest.raises(ConfigError, match=reason):
        plugin_class(group, name)


def test_a_model_naming_a_missing_path_is_refused_at_build():
    with pytest.raises(ConfigError, match=r"hybrid_vla_ros.heads: plugin 'my_pkg.heads:Planner': no module 'my_pkg'"):
        build_model(by_path_spec(head="my_pkg.heads:Planner"))


def installed_entry_points(root, group: str, lines: str):
    """A distribution on the path, as pip leaves one: a .dist-info folder with METADATA and entry_points.txt."""
    info = root / "acme_shadow-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-shadow\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}\n")
    return root


def test_an_entry_point_named_like_a_shipped_plugin_is_refused_naming_both(tmp_path, monkeypatch):
    assert plugin_class(HEADS, "gru").plugin_name == "gru"
    monkeypatch.syspath_prepend(str(installed_entry_points(tmp_path, HEADS, "mlp = plugin_by_path:SpyHead")))
    both = (r"plugin 'mlp' is shipped with hybrid_vla_ros \(hybrid_vla_ros.model.plugins.heads:MlpHead\) and also "
            r"installed as an entry point \(plugin_by_path:SpyHead, package acme-shadow\)")
    with pytest.raises(ConfigError, match=both):
        build_model(get_preset("tiny"))            # its head is `mlp`: never silently the shipped one
    with pytest.raises(ConfigError, match=both):
        plugin_class(HEADS, "gru")                 # any look-up in the group, while the clash is installed
    assert plugin_class(HEADS, HEAD) is not None   # a path names one class only: never ambiguous
    monkeypatch.undo()
    assert plugin_class(HEADS, "mlp").plugin_name == "mlp"


def test_an_entry_point_of_the_wrong_kind_is_refused(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(installed_entry_points(tmp_path, SCENE_ENCODERS,
                                                           "spy = plugin_by_path:SpyHead")))
    with pytest.raises(ConfigError, match=r"plugin 'spy' \(plugin_by_path:SpyHead\) is .*not a subclass of "
                                          r"hybrid_vla_ros.model.plugins.scene_encoders:SceneEncoder"):
        plugin_class(SCENE_ENCODERS, "spy")


def test_the_registry_table_gives_each_shipped_name_once_and_each_entry_is_what_its_group_asks():
    """model/registry.py's one table: a name written twice would be kept silently (the last one), so none is;
    every entry imports to a class of its group, a family under its own `name`."""
    for node in ast.walk(ast.parse(Path(registry.__file__).read_text())):
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    assert {"qwen2_vl", "internvl", "scene_qwen3"} <= set(family_names())
    for name in family_names():
        assert isinstance(get_family(name), Family) and get_family(name).name == name
    for group, base in ((HEADS, "WaypointHead"), (SCENE_ENCODERS, "SceneEncoder")):
        for name in plugin_names(group):
            cls = plugin_class(group, name)
            assert cls.plugin_name == name and base in [c.__name__ for c in cls.__mro__]


def test_a_family_entry_naming_another_family_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "_FAMILIES", {})
    monkeypatch.setitem(registry._TABLE[registry.FAMILIES], "llava",
                        "hybrid_vla_ros.model.families.qwen2_vl:Qwen2VLFamily")
    with pytest.raises(ConfigError, match=r"'llava' \(hybrid_vla_ros.model.families.qwen2_vl:Qwen2VLFamily\) is not "
                                          r"a Family named 'llava'"):
        get_family("llava")
