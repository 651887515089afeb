"""An Alpamayo release's prefix on a GPU (issue 51, Deliver 3): `device: cuda` with `dtype` fp32, bf16 or fp16, the
suffix on the CPU; what crosses comes back to the CPU (engine/expert_split/prefix.py), the weights of the prefix's
side are read onto the GPU with their buffers (model/plugins/alpamayo/release.py read_more). Needs a GPU: skipped
here with that reason; the device script (scripts/gpu_check.sh) runs it. On a CPU-only machine the settings are
checked instead (test_alpamayo_verify.py: fp16 on the CPU and cuda without CUDA refused with the reason)."""

import numpy as np
import pytest
import torch

from hybrid_vla_ros.model.load import load_vla
from test_alpamayo_graph import camera_sets, expected, graph_params, one_process
from test_alpamayo_graph import releases  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (scripts/gpu_check.sh runs it)")


def test_the_prefix_reads_its_side_onto_the_gpu_and_leaves_the_rest_unread(releases):  # noqa: F811
    from hybrid_vla_ros.engine.expert_split.sides import side_reads
    from hybrid_vla_ros.ros.nodes.serving.alpamayo.weights import with_weights
    shapes = load_vla(checkpoint=str(releases["1.5"]), shapes_only=True)
    model = with_weights(shapes, "prefix", (2, 2), torch.bfloat16, device="cuda")
    reads = side_reads(model, "prefix", (2, 2))
    for name, p in model.named_parameters():
        assert (p.device.type == "cuda" and p.dtype == torch.bfloat16) if reads(name) else p.is_meta, name
    assert all(b.device.type == "cuda" for b in model.buffers() if not b.is_meta)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_a_gpu_prefix_serves_a_release_beside_a_cpu_suffix(releases, domain, dtype):  # noqa: F811
    """fp32 (TF32 off): the CPU reference's tokens and trajectory within 1e-3 m; bf16 / fp16: every frame served,
    finite (their distance from fp32 is printed, not bounded)."""
    params = graph_params(releases["r1"], False)
    params["hybrid_vla_prefix"].update(device="cuda", dtype=dtype)
    with one_process(params) as (graph, driver):
        prefix = graph.nodes["hybrid_vla_prefix"]
        assert prefix.serving.model.vlm.model.language_model.embed_tokens.weight.device.type == "cuda"
        sets = camera_sets(2)
        paths, infos = driver.drive(sets, timeout_s=120)
        refs = expected(load_vla(checkpoint=str(releases["r1"])), sets, False)
        for path, info, ref in zip(paths, infos, refs):
            xy = np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])
            assert np.isfinite(xy).all()
            moved = float(np.abs(xy - ref.xyz[:, :2].double().numpy()).max())
            same = info["tokens"] == ",".join(map(str, ref.tokens))
            print(f"GPU prefix {dtype}: tokens {'equal' if same else 'differ'}, largest plan difference from the "
                  f"CPU fp32 reference {moved:.2e} m")
            if dtype == "fp32":
                assert same and moved <= 1e-3
