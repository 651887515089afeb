"""ReCogDrive's planner as its authors' own code saves it (issue 56): Lightning .ckpt files built from the manifests
scripts/extract_manifest.py wrote from `ReCogDriveAgent` in their `AgentLightningModule`, saved by a real Lightning
Trainer (xiaomi-research/recogdrive@79a553b as NIyueeE/recogdrive holds it, transformers 4.37.2), not from this
package's module tree. The tiny planner (the DiT preset and feature_encoder's VLM width patched to the
tiny-recogdrive sizes, recorded in the manifest) converts with the package's tiny VLM directory through the
documented `--also ckpt:` and verifies exact at every cut; the released 'small' planner's keys and shapes, routed
by the shipped mapping, are the package's `ddim_planner` head's at the 2B VLM width, on the meta device.
The VLM half (InternVLChatModel.save_pretrained) is not extracted here."""

import torch
import yaml

from hybrid_vla_ros.convert import convert_checkpoint, load_mapping
from hybrid_vla_ros.convert.route import route
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.model.checkpoint import load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.plugins.diffusion_head import DdimPlannerHead
from hybrid_vla_ros.model.seeded import parameters_on_meta
from manifest_checkpoint import load_manifest, state_from_manifest
from published_layouts import INTERNVL3_FIELDS, internvl_chat_dir
from test_published_recogdrive import mapping_for_tiny


def test_the_manifests_were_extracted_from_the_authors_code_at_the_named_commit():
    for size in ("tiny", "released"):
        manifest = load_manifest(f"recogdrive_{size}")
        assert manifest["snapshot"]["commit"].startswith("79a553b") and manifest["size"] == size
        assert manifest["versions"]["transformers"] == "4.37.2" and "nuplan" in manifest["stubbed_modules"]
        assert {"state_dict", "epoch", "global_step", "pytorch-lightning_version"} <= set(
            manifest["container"]["top_level"])                        # a Lightning Trainer's file
        assert all(k.startswith("agent.action_head.") for k, *_ in manifest["tensors"])
    shapes = {k: s for k, s, *_ in load_manifest("recogdrive_released")["tensors"]}
    assert shapes["agent.action_head.feature_encoder.weight"] == [384, 1536]      # the 2B VLM's width, hard-coded


def test_the_authors_tiny_planner_converts_with_the_shipped_mapping_and_verifies_exact(tmp_path):
    manifest = load_manifest("recogdrive_tiny")
    model = load_vla(preset="tiny-recogdrive")
    assert model.spec.hidden_size == manifest["vlm_hidden"]
    saved = save_checkpoint(model, tmp_path / "saved")
    image_token = internvl_chat_dir(saved, tmp_path / "ReCogDrive-VLM-2B", **INTERNVL3_FIELDS)
    state = state_from_manifest(manifest)
    ckpt = tmp_path / "recogdrive_agent.ckpt"
    torch.save({**{k: 0 for k in manifest["container"]["top_level"]}, "state_dict": state}, ckpt)
    report = convert_checkpoint("internvl_chat", tmp_path / "ReCogDrive-VLM-2B",
                                mapping_for_tiny(tmp_path, image_token, model.spec), tmp_path / "out",
                                also=[("ckpt", ckpt)])
    planner = [k for k in report.dropped if k.startswith("agent.")]   # the schedule tables, rotary, eta
    assert sum(1 for k in state if k.startswith("agent.")) == report.counts["action_head"] + len(planner)
    converted = load_checkpoint(tmp_path / "out")
    result = verify_partitions(converted, frames=2)
    assert [r["partition"] for r in result["results"]] == list(range(converted.num_blocks + 1))
    assert result["max_abs_diff"] == 0.0, result["results"]


def test_the_released_planner_meets_the_shipped_mapping_on_the_meta_device():
    manifest = load_manifest("recogdrive_released")
    mapping = load_mapping("recogdrive")
    routed = route({k: torch.empty(s, dtype=getattr(torch, d), device="meta") for k, s, d, *_ in manifest["tensors"]},
                   mapping)
    head = yaml.safe_load(open(mapping.source))["action_head"]
    config = {**head["head_config"], "num_waypoints": head["num_waypoints"], "head_hidden": head["head_hidden"],
              "query_tokens": head["query_tokens"]}
    with parameters_on_meta():
        ours = DdimPlannerHead.from_config(config, hidden_size=manifest["vlm_hidden"])
    theirs = {k: tuple(v.shape) for k, v in routed.parts["action_head"].items()}
    wanted = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert {k: (theirs.get(k), s) for k, s in wanted.items() if theirs.get(k) != s} == {}
    assert sorted(set(theirs) - set(wanted)) == []
