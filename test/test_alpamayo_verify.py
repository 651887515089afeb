"""Issue 51: `hybrid-vla verify` on an Alpamayo model runs its split (engine/expert_split run_split) against the
unsplit reference (run_reference) at every cut, decode + expert, without and (1.5) with route guidance, and
prints 0.0 at every p; a real-size preset is refused in one line instead of dying on the meta device; every
command given a model it does not serve says so in one line, with what serves it."""

import json
import re
import subprocess
import sys

import pytest
import torch

from hybrid_vla_ros.cli import main
from hybrid_vla_ros.engine.expert_split import run_split
from hybrid_vla_ros.engine.expert_split.verify import difference, flow_settings, synthetic_inputs
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.plugins.alpamayo import Sampling, run_reference
from hybrid_vla_ros.model.presets import ALPAMAYO_PRESETS

LINE = re.compile(r"^  p=\s*(\d+)  max_abs_diff=(\S+)(?:  \(no guidance (\S+), guidance (\S+)\))?  images encoded "
                  r"per run \[[\d, ]+\]$")


def verify_lines(capsys, *args) -> tuple[int, list[str]]:
    code = main(["verify", *args])
    return code, capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("name", sorted(ALPAMAYO_PRESETS))
def test_verify_prints_zero_at_every_cut_for_the_tiny_alpamayo_presets(capsys, name):
    code, lines = verify_lines(capsys, "--preset", name, "--frames", "1")
    assert code == 0, lines
    guided = name == "tiny-alpamayo-1.5"
    assert lines[0].startswith(f"{name} (") and ("without and with guidance" in lines[0]) == guided
    assert lines[1].startswith("  each image encoded once: undecided (not probed yet")   # one window: nothing repeats
    rows = [LINE.match(line) for line in lines[2:]]
    assert all(rows) and [int(r.group(1)) for r in rows] == list(range(5))       # 4 blocks: p = 0 .. 4
    for row in rows:
        values = [float(v) for v in row.groups()[1:] if v is not None]
        assert values == [0.0] * (3 if guided else 1), row.group(0)


def test_verify_json_has_both_guidance_cases_for_1_5(capsys):
    code = main(["verify", "--preset", "tiny-alpamayo-1.5", "--frames", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["guidance"] == [False, True] and report["family"] == "alpamayo1_5"
    assert [r["partition"] for r in report["results"]] == list(range(report["num_blocks"] + 1))
    assert all(r["unguided_max_abs_diff"] == r["guided_max_abs_diff"] == 0.0 for r in report["results"])


def test_the_comparison_sees_a_different_sample_and_guidance_changes_the_trajectory():
    """What verify compares can differ: another seed changes the split's result, guidance the reference's."""
    model = load_vla(preset="tiny-alpamayo-1.5")
    sampling = Sampling(max_new_tokens=4)
    inputs = synthetic_inputs(model, 0, route=True)
    plain = run_reference(model, inputs, 0, sampling, flow_settings(model, False), False)
    guided = run_reference(model, inputs, 0, sampling, flow_settings(model, True), True)
    assert plain.tokens == guided.tokens and difference(guided, plain) > 0
    other = run_split(model, inputs, 2, 1, sampling, flow_settings(model, True), True).result
    assert difference(other, guided) > 0


def test_the_presets_are_seeded_the_same_on_every_build():
    a, b = load_vla(preset="tiny-alpamayo-r1"), load_vla(preset="tiny-alpamayo-r1")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_verify_runs_an_alpamayo_model_in_bf16_exact_and_refuses_what_it_has_no_cpu_path_for(capsys):
    """bf16 on both sides equals the unsplit bf16 model at every cut (fp32 is the test above); fp16 or a suffix
    in another dtype than the prefix has no unsplit reference here: refused in one line."""
    code, out = verify_lines(capsys, "--preset", "tiny-alpamayo-r1", "--dtype", "bf16")
    assert code == 0 and "bf16" in out[0]
    assert [float(LINE.match(line).group(2)) for line in out[2:]] == [0.0] * 5
    for args in (["--dtype", "fp16"], ["--dtype", "bf16", "--suffix-dtype", "fp32"]):
        assert main(["verify", "--preset", "tiny-alpamayo-r1", *args]) == 2
        assert args[-1] in capsys.readouterr().err


def test_verify_on_the_real_size_alpamayo_preset_is_one_line_not_a_meta_device_traceback():
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "verify", "--preset", "alpamayo-like"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "real size" in out.stderr and "tiny-alpamayo" in out.stderr


# command -> the arguments it needs besides the model
COMMANDS = {"verify": [], "info": [], "run": ["--frames", "1"], "export": ["--out", "{tmp}/export"],
            "bench": ["--frames", "2"], "memory": ["--partition", "1"], "profile": [], "plan": [],
            "calibrate": ["--out", "{tmp}/cal"], "train": ["--out", "{tmp}/train", "--steps", "1"],
            "eval": ["--drives", "1"], "make-sample-drive": ["--out", "{tmp}/drive", "--frames", "2"]}
SERVED = {"tiny-act": {"verify", "info", "export", "make-sample-drive", "memory", "bench"},
          "tiny-alpamayo-1.5": {"verify", "bench"}, "tiny-alpamayo-r1": {"verify", "bench"},
          "alpamayo-r1-like": {"info", "plan"}}
# preset -> what its refusal must name as serving it
SERVED_BY = {"tiny-act": "`bench` (native, serial, pipelined", "tiny-alpamayo-1.5": "`hybrid-vla verify`",
             "tiny-alpamayo-r1": "`hybrid-vla verify`", "alpamayo-r1-like": "--preset tiny-alpamayo-r1"}


@pytest.mark.parametrize("command, preset", [(c, p) for p in sorted(SERVED) for c in sorted(COMMANDS)
                                             if c not in SERVED[p]])
def test_a_command_that_does_not_serve_a_model_says_so_in_one_line_with_what_serves_it(capsys, tmp_path, command,
                                                                                       preset):
    args = [a.format(tmp=tmp_path) for a in COMMANDS[command]]
    assert main([command, "--preset", preset, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"hybrid-vla {command}: error: model '{preset}'"), err
    assert f"`hybrid-vla {command}` does not serve it; served by" in err
    assert SERVED_BY[preset] in err


def test_bench_with_action_tokens_serves_an_action_token_model():
    from argparse import Namespace
    from hybrid_vla_ros.cli.common import refuse_unserved
    refuse_unserved(Namespace(command="bench", preset="tiny-act", checkpoint=None, default_preset="tiny",
                              head="action-tokens"))


def test_verify_takes_a_release_directory_as_its_authors_save_it(capsys, tmp_path):
    from manifest_checkpoint import load_manifest, write_safetensors_release
    write_safetensors_release(load_manifest("alpamayo1_5_tiny"), tmp_path)
    code, lines = verify_lines(capsys, "--checkpoint", str(tmp_path), "--frames", "1")
    assert code == 0 and lines[0].startswith(f"{tmp_path.name} (alpamayo1_5, ")
    rows = [LINE.match(line) for line in lines[2:]]
    assert all(rows) and all(float(v) == 0.0 for r in rows for v in r.groups()[1:])


def test_an_action_token_checkpoint_is_told_apart_by_its_heads_metadata(capsys, tmp_path):
    assert main(["export", "--preset", "tiny-act", "--out", str(tmp_path / "act")]) == 0
    capsys.readouterr()
    assert main(["train", "--checkpoint", str(tmp_path / "act"), "--out", str(tmp_path / "train")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "decodes action tokens: `hybrid-vla train` does not serve it" in err


def test_memory_passes_its_stage_processes_refusal_on_in_one_line():
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "memory", "--preset", "tiny", "--partition", "9"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr and out.stderr.strip().count("\n") == 0
    assert "partition: 9 is outside 0..4" in out.stderr


def test_the_nodes_take_an_alpamayo_preset_as_built_with_nothing_to_read():
    """The prefix and suffix nodes' stage (ros/nodes/serving/alpamayo) serves the preset's own weights: no directory."""
    from hybrid_vla_ros.ros.nodes.serving.alpamayo.weights import with_weights
    model = load_vla(preset="tiny-alpamayo-r1", lazy=True)
    assert model.checkpoint_directory is None and with_weights(model, "suffix", (0, 4)) is model
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_memory_measures_each_side_of_a_release_reading_only_its_tensors(tmp_path):
    """Issue 51's "own side" for a release: `hybrid-vla memory --checkpoint DIR` runs each side in a process of its
    own, as its node reads it (engine/expert_split/sides.py). The release has 12 VLM blocks of ~6 MiB (wide MLPs,
    2 MiB a tensor) so that the weights stand out of RSS noise and one tensor in flight is a small part of a side:
    each side holds within 15% of the bytes of its own parameters, its peak above the code too, and neither reads
    the other's (cut 6, zone [5, 7]: blocks 5 and 6 on both)."""
    import published_alpamayo
    from hybrid_vla_ros.engine.expert_split.sides import side_reads
    text = dict(published_alpamayo.TEXT, intermediate_size=8192, num_hidden_layers=12)
    original, published_alpamayo.TEXT = published_alpamayo.TEXT, text
    try:
        directory = published_alpamayo.write_release(tmp_path / "wide", "alpamayo1_5", seed=3)
    finally:
        published_alpamayo.TEXT = original
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "memory", "--checkpoint", str(directory),
                          "--partition", "6", "--zone", "5,7", "--json", str(tmp_path / "memory.json")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    stages = json.loads((tmp_path / "memory.json").read_text())["stages"]
    shapes = load_vla(checkpoint=str(directory), shapes_only=True)
    for side, report in stages.items():
        reads = side_reads(shapes, side, (5, 7))
        own = [p for n, p in shapes.named_parameters() if reads(n)]
        assert report["tensors_read"] == len(own) < report["tensors_in_release"]
        assert report["weight_bytes"] == sum(p.numel() * 4 for p in own)
        assert report["within_target"], report   # weights resident within 15% of that
        assert report["peak_within_target"], report   # and the load's peak above the code
    assert stages["prefix"]["weight_bytes"] + stages["suffix"]["weight_bytes"] > \
        sum(p.numel() * 4 for p in shapes.parameters())   # the zone's blocks on both sides
    for args, said in ((["--zone", "3,4"], "outside the dynamic zone"), (["--dtype", "fp16"], "fp32 or bf16")):
        out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "memory", "--checkpoint", str(directory),
                              "--partition", "2", *args], capture_output=True, text=True, timeout=600)
        assert out.returncode == 2 and said in out.stderr and out.stderr.strip().count("\n") == 0, out.stderr


def test_each_node_takes_its_dtype_for_a_release_and_refuses_the_rest_with_the_reason():
    """fp32 or bf16 on either side, auto and int8 on the suffix; fp16, int8 on the prefix, auto on the prefix and a
    GPU prefix refused, naming what."""
    from hybrid_vla_ros.engine.dtype_choice import DtypeChoice
    from hybrid_vla_ros.errors import ConfigError
    from hybrid_vla_ros.ros.nodes.serving.alpamayo.settings import side_dtype
    model = load_vla(preset="tiny-alpamayo-r1", shapes_only=True)
    assert side_dtype({"dtype": "bf16", "device": "cpu"}, "prefix", model, None).dtype == "bf16"
    auto = side_dtype({"dtype": "auto"}, "suffix", model, None)   # the probe on the release's block shapes
    assert isinstance(auto, DtypeChoice) and auto.dtype in ("fp32", "bf16") and auto.reason
    assert side_dtype({"dtype": "int8"}, "suffix", model, None).dtype == "int8"
    for params, side, named in (({"dtype": "int8", "device": "cpu"}, "prefix", "dtype=int8"),
                                ({"dtype": "fp16"}, "suffix", "fp16"),
                                ({"dtype": "fp16", "device": "cpu"}, "prefix", "fp16 on a GPU only"),
                                *([({"dtype": "fp32", "device": "cuda"}, "prefix", "prefix device 'cuda'")]
                                  if not torch.cuda.is_available() else []),
                                ({"dtype": "auto", "device": "cpu"}, "prefix", "dtype=auto")):
        with pytest.raises(ConfigError, match=named):
            side_dtype(params, side, model, None)
