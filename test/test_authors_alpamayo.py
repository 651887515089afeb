"""Alpamayo 1 (R1) and 1.5 as their authors' own code saves them (issue 56): release directories built from the
manifests scripts/extract_manifest.py wrote from `AlpamayoR1` (NVlabs/alpamayo@1cba38c) and `Alpamayo1_5`
(NVlabs/alpamayo1.5@f42e594) with transformers 4.57.1, each saved by its own `save_pretrained` (config.json and
safetensors as written, the backbone's config where vlm_name_or_path points), not from this package's module tree.
The tiny one loads with every tensor from its file and splits at every cut equal to the unsplit reference; the
released-size one (built on the meta device, its shards recorded) has the keys and shapes the package's model
builds from the same config.json; the special-token ids are the ones the authors' tokenizer code assigns."""

import pytest
import torch
from safetensors import safe_open

from hybrid_vla_ros.engine.expert_split import run_split
from hybrid_vla_ros.model.plugins import alpamayo
from hybrid_vla_ros.model.plugins.alpamayo.config import parse
from manifest_checkpoint import load_manifest, write_safetensors_release

RELEASES = {"alpamayo_r1": "1cba38c", "alpamayo1_5": "f42e594"}
SHORT = alpamayo.Sampling(max_new_tokens=6)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """{release: (manifest, directory, model)} for the tiny manifests."""
    built = {}
    for name in RELEASES:
        manifest = load_manifest(f"{name}_tiny")
        folder = tmp_path_factory.mktemp(name)
        write_safetensors_release(manifest, folder)
        built[name] = (manifest, folder, alpamayo.load_release(folder))
    return built


def frame(manifest: dict, route: bool, cameras: int = 2, frames: int = 2) -> alpamayo.AlpamayoInputs:
    """A prompt in the published layout with the ids the authors' code assigned (special_token_ids), images of
    2 x 2 patches (one merged token each), 16 history poses at 5 m/s straight ahead."""
    special, vlm = manifest["special_token_ids"], manifest["backbone_config"]
    gen = torch.Generator().manual_seed(0)
    ids = list(range(10, 22))
    for _ in range(cameras * frames):
        ids += [vlm["vision_start_token_id"], vlm["image_token_id"], vlm["vision_end_token_id"]]
    ids += [special["traj_history_start"]] + [special["traj_history"]] * 48 + [special["traj_history_end"]]
    if route:
        ids += [special["route_start"], 40, 41, 42, special["route_end"]]
    ids += list(range(50, 60)) + [special["cot_start"]]
    t = torch.arange(-15, 1, dtype=torch.float32) * 0.1
    xyz = torch.stack([5.0 * t, torch.zeros(16), torch.zeros(16)], -1).view(1, 1, 16, 3)
    images = cameras * frames
    patch = vlm["vision_config"]["patch_size"]
    return alpamayo.AlpamayoInputs(
        input_ids=torch.tensor([ids]), image_grid_thw=torch.tensor([[1, 2, 2]] * images),
        pixel_values=torch.randn(images * 4, 3 * 2 * patch * patch, generator=gen),
        ego_history_xyz=xyz, ego_history_rot=torch.eye(3).expand(1, 1, 16, 3, 3).clone())


def test_the_manifests_were_extracted_from_the_authors_code_at_the_named_commits():
    for name, commit in RELEASES.items():
        for size in ("tiny", "released"):
            manifest = load_manifest(f"{name}_{size}")
            assert manifest["model"] == name and manifest["size"] == size
            assert manifest["snapshot"]["commit"].startswith(commit)
            assert manifest["versions"]["transformers"] == "4.57.1"
            assert manifest["config_json"]["model_type"] == name and manifest["config_json"]["architectures"]
            assert "config.json" in manifest["container"]["saved_files"]
    released = load_manifest("alpamayo_r1_released")["container"]
    assert released["index"] == ["metadata", "weight_map"] and len(released["files"]) > 1   # sharded, with an index


@pytest.mark.parametrize("name", RELEASES)
def test_the_authors_tiny_release_loads_every_tensor_from_its_file(tiny, name):
    manifest, folder, model = tiny[name]
    params = dict(model.named_parameters())
    assert set(params) <= {k for k, *_ in manifest["tensors"]}
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        for key in f.keys():
            current = params.get(key)
            if current is None:
                current = dict(model.named_buffers())[key]
            assert torch.equal(current, f.get_tensor(key)), key


@pytest.mark.parametrize("size", ["tiny", "released"])
@pytest.mark.parametrize("name", RELEASES)
def test_the_package_assigns_the_special_token_ids_the_authors_code_assigns(tiny, name, size):
    """<|image_pad|> is in the base vocabulary (the backbone's image_token_id): add_tokens keeps its id and adds
    28 tokens, so the ids after it are one lower than 29 added tokens would give (route_start among them)."""
    manifest = load_manifest(f"{name}_{size}")
    ours = parse(manifest["config_json"], tiny[name][1] if size == "tiny" else None).special_ids
    theirs = manifest["special_token_ids"]             # 1.5 names the unused ones _padding_0 .. _padding_8
    common = set(ours) & set(theirs)
    assert {"cot_start", "traj_future_start", "route_start", "route_end", "image_pad"} <= common
    assert {k: ours[k] for k in common} == {k: theirs[k] for k in common}
    assert sorted(ours.values()) == sorted(theirs.values())


@pytest.mark.parametrize("name, guidance", [("alpamayo_r1", False), ("alpamayo1_5", False), ("alpamayo1_5", True)])
def test_the_authors_tiny_release_splits_exactly_at_every_cut(tiny, name, guidance):
    manifest, _, model = tiny[name]
    inputs, flow = frame(manifest, route=guidance), alpamayo.FlowSettings(guidance_weight=3.0)
    reference = alpamayo.run_reference(model, inputs, seed=7, sampling=SHORT, flow=flow, guidance=guidance)
    assert torch.isfinite(reference.xyz).all()
    blocks = manifest["backbone_config"]["text_config"]["num_hidden_layers"]
    for p in range(blocks + 1):
        split = run_split(model, inputs, p, seed=7, sampling=SHORT, flow=flow, guidance=guidance)
        assert split.result.tokens == reference.tokens
        assert float((split.result.xyz - reference.xyz).abs().max()) == 0.0, p


@pytest.mark.parametrize("name", RELEASES)
def test_the_released_manifest_meets_the_packages_model_on_the_meta_device(name):
    manifest = load_manifest(f"{name}_released")
    model = alpamayo.build(parse(manifest["config_json"], None))      # Qwen3-VL-8B shapes: the package's own
    assert all(p.device.type == "meta" for p in model.parameters())
    theirs = {k: tuple(s) for k, s, *_ in manifest["tensors"]}
    ours = {k: tuple(t.shape) for k, t in model.state_dict().items()}
    params = {k for k, _ in model.named_parameters()}
    assert {k: ours.get(k) for k in theirs if ours.get(k) != theirs[k]} == {}
    assert sorted(params - set(theirs)) == []
    extra = sorted(set(ours) - set(theirs))      # buffers the package publishes but this release does not save
    assert extra == ([] if name == "alpamayo_r1" else
                     ["action_space.accel_mean", "action_space.accel_std", "action_space.curvature_mean",
                      "action_space.curvature_std"])
    files = manifest["container"]["files"]
    assert sorted(k for keys in files.values() for k in keys) == sorted(theirs)
