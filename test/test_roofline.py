"""profile --roofline: FLOPs counted from the shapes, the report's fields, and the CLI's table/JSON/plot."""

import json
import subprocess
import sys

from hybrid_vla_ros.bench.graph import graph_overrides
from hybrid_vla_ros.bench.kernels.roofline import block_flops
from hybrid_vla_ros.engine.placement import Placement
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.presets import get_preset


def test_block_flops_of_a_qwen2_7b_layer_match_its_parameter_count():
    """Qwen2-7B's decoder layer holds 233M matrix parameters (q/o 3584^2, k/v 3584x512, MLP 3 x 3584x18944)."""
    spec = get_preset("internvl3-8b-like")   # Qwen2.5-7B blocks
    flops = block_flops(spec, 512)
    assert flops["weight_params"] == 2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944
    assert flops["linear"] == 2 * 512 * flops["weight_params"]
    assert flops["attention"] == 2 * 2 * 3584 * 512 * 512 / 2          # causal half of QK^T and PV
    assert block_flops(spec, 1024)["attention"] == 4 * flops["attention"]  # quadratic in N


def test_roofline_cli_times_each_side_against_its_ceiling(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "profile", "--roofline", "--preset", "tiny",
                          "--tokens", "16,64", "--blocks", "1", "--json", str(tmp_path / "r.json"),
                          "--plot", str(tmp_path / "r.png")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    for side in ("prefix", "suffix"):
        rows = report[side]["rows"]
        assert [r["tokens"] for r in rows] == [16, 64]
        assert all(r["block_ms"] > 0 and r["ceiling_gflops"] > 0 and r["of_ceiling"] > 0 for r in rows)
        assert report[side]["decode"]["bandwidth_gbs"] > 0
    assert "of ceiling" in out.stdout and (tmp_path / "r.png").stat().st_size > 1000


def test_graph_modes_serve_a_checkpoint_directory(tmp_path):
    from hybrid_vla_ros.model.checkpoint import save_checkpoint
    save_checkpoint(load_vla(preset="tiny"), tmp_path)
    model = load_vla(checkpoint=str(tmp_path), lazy=True)
    overrides = graph_overrides(model, Placement(), 2, [0], [1], 2)
    assert {overrides[n]["model.checkpoint"] for n in overrides} == {str(tmp_path)}
