"""The converted ORION / MindDrive heads against their authors' own planner code (issue 56): golden inputs and
outputs that scripts/extract_golden.py recorded by running the authors' classes (ORION: RenTianchi-cityu/Orion_25
@2eddb62; MindDrive: xiaomi-mlab/MindDrive@1a4085d) at the tiny size, loaded with the values
test/manifest_checkpoint.py gives the tiny manifest's tensors. Here the same values are written as the authors'
mmcv file, converted with the shipped mapping (only sizes changed), loaded, and the converted head is fed the
recorded inputs. No network, no authors' code at test time.

Compared: every mode's per-step offsets of the VAE branch(es) on the recorded feature and latent noise; the whole
head (mode / path chosen by the route command, the decision by its speed tokens, noise drawn from the recorded
seed); MindDrive's 7 decision log-probabilities from the final hidden states their LLM computed. Tolerance: TOL
times the largest value compared, or TOL below 1 (offsets of metres; float32, another operation order; measured
up to 2.1e-5 m on 20-point paths reaching 86 m, 1.4e-6 on offsets of up to 4.4 m)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from hybrid_vla_ros.convert import convert_checkpoint
from hybrid_vla_ros.model.checkpoint import load_checkpoint
from hybrid_vla_ros.model.plugins.driving_heads import NAV_COMMANDS
from hybrid_vla_ros.model.plugins.vae_planners import noises, vae_plan
from manifest_checkpoint import llm_config_dir, load_manifest, sets, write_pth

GOLDEN = Path(__file__).resolve().parent / "data" / "golden"
TOL = 1e-5          # x the largest value compared (at least 1): float32 in another operation order


def _golden(name: str) -> dict:
    return json.loads(gzip.decompress((GOLDEN / f"{name}_planner.json.gz").read_bytes()))


def _convert(name: str, folder: Path):
    """(golden data, the converted model's head) for one model."""
    manifest = load_manifest(f"{name}_tiny")
    golden = _golden(name)
    write_pth(manifest, folder / f"{name}.pth", golden["scale"])        # the values the authors' code ran with
    convert_checkpoint("pth", folder / f"{name}.pth", name, folder / "out",
                       config_dir=llm_config_dir(manifest, folder / "llm"), sets=sets(manifest))
    assert golden["manifest"] == f"{name}_tiny" and golden["model"] == name
    return golden, load_checkpoint(folder / "out").action_head.eval()


@pytest.fixture(scope="module")
def orion(tmp_path_factory):
    return _convert("orion", tmp_path_factory.mktemp("orion"))


@pytest.fixture(scope="module")
def minddrive(tmp_path_factory):
    return _convert("minddrive", tmp_path_factory.mktemp("minddrive"))


@pytest.fixture(params=["orion", "minddrive"])
def converted(request):
    return request.getfixturevalue(request.param)


def _t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    error = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
    assert torch.isfinite(got).all() and error <= TOL, error


def test_the_golden_data_came_from_the_authors_code_at_the_named_commits(converted):
    golden, _ = converted
    commit = {"orion": "2eddb62", "minddrive": "1a4085d"}[golden["model"]]
    assert golden["snapshot"]["commit"].startswith(commit) and golden["versions"]["peft"] == "0.12.0"
    assert len(golden["cases"]) >= 3 and all(_t(c["offsets"]).abs().max() > 0.5 for c in golden["cases"])


def test_every_mode_of_the_converted_branches_equals_the_authors_planner(converted):
    golden, head = converted
    with torch.no_grad():
        for case in golden["cases"]:
            plans = vae_plan(head.present_distribution, head.predict_model, head.ego_fut_decoder,
                             _t(case["feature"])[None], 6, _t(case["noise"]).view(1, 1, -1))
            _close(plans[0], _t(case["offsets"]))
            moved = vae_plan(head.present_distribution, head.predict_model, head.ego_fut_decoder,
                             _t(case["feature"])[None], 6, 1.1 * _t(case["noise"]).view(1, 1, -1))
            with pytest.raises(AssertionError):          # the comparison tells a 10 % larger latent noise apart
                _close(moved[0], _t(case["offsets"]))
            if "path_offsets" in case:
                paths = vae_plan(head.pw_present_distribution, head.pw_predict_model, head.pw_ego_fut_decoder,
                                 _t(case["path_feature"])[None], head.path_points, _t(case["path_noise"]).view(1, 1, -1))
                _close(paths[0], _t(case["path_offsets"]))


def _one_hot(command: str) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor([NAV_COMMANDS.index(command)]), len(NAV_COMMANDS)).float()


def test_the_whole_orion_head_plans_the_authors_mode_for_each_route_command(orion):
    golden, head = orion
    with torch.no_grad():
        for case in golden["cases"]:
            assert torch.equal(noises(case["noise_seed"], 1, 1)[0].flatten(), _t(case["noise"]))
            for mode, command in enumerate(head.mode_commands):
                out = head(_t(case["feature"])[None, None], _one_hot(command), case["noise_seed"])
                _close(out["waypoints"][0, :, :2], _t(case["offsets"])[mode])
                _close(out["waypoints"][0, :, :2].cumsum(0), _t(case["offsets"])[mode].cumsum(0))


def test_the_minddrive_decision_and_whole_head_equal_the_authors(minddrive):
    golden, head = minddrive
    decision = golden["decision"]
    assert head.tokens == decision["tokens"]                 # the mapping's speed-token ids are the authors'
    hidden = _t(decision["hidden"])[None]                    # (1, S, H): their LLM's final hidden states
    sequence = torch.stack([hidden, hidden], dim=1)          # (1, P, S, H): the decision pass is pass 0
    with torch.no_grad():
        log_probs, speed = head.decide(sequence)
        _close(log_probs[0], _t(decision["log_probs"]))
        want = int(_t(decision["log_probs"]).argmax())
        assert int(speed) == want
        for case in golden["cases"]:
            query = torch.stack([_t(case["feature"]), _t(case["path_feature"])])[None]   # (1, 2, H)
            for path_mode, command in enumerate(head.path_commands):
                out = head(query, sequence, _one_hot(command), case["noise_seed"])
                _close(out["waypoints"][0, :, :2], _t(case["offsets"])[want])
                _close(out["path"][0], _t(case["path_offsets"])[path_mode].cumsum(0))
