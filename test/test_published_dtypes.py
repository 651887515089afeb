"""The suffix's dtype for the published shapes (issue 51, item 2's dtype column, rows ORION, SimLingo, ReCogDrive):
the route drive of test_published_graph.py, each model converted from its published layout, served in one process
with the suffix in fp32, bf16, int8 and auto. Every frame is published, finite, none refused, and each within 5%
of the fp32 plan's extent (its largest |x|, |y|): bf16 and int8 change the numbers (they differ from fp32), not the
plan. Measured by this test's runs (`pytest test/test_published_dtypes.py`, its `diffs` printed once) on a
2-core AMD EPYC with avx2, avx512f/bw/cd/dq/vl/vnni/ifma/vbmi/vbmi2/bitalg/vpopcntdq, avx512_bf16, no AMX:
ORION 0.6% (0.004 m of 0.67 m), SimLingo 0.5% bf16 and 2% int8, ReCogDrive 1.8% bf16 and 1% int8 (1.15 m of a
65 m plan: its DDIM head denoises from the blocks' output over its steps, which carries their rounding further
than a single-pass head). auto runs what its start-up probe chose (fp32 or bf16 here; the probe's own test is in
test_ros_graph.py)."""

import numpy as np
import pytest

from test_published_graph import CONVERTED, FRAMES, graph_overrides, refused

pytestmark = pytest.mark.slow
DTYPES = ("fp32", "bf16", "int8", "auto")


@pytest.mark.parametrize("model", ["orion", "simlingo", "recogdrive"])
def test_a_published_shape_is_served_with_its_suffix_in_every_dtype(model, domain, tmp_path):
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.ros.bags.drives import write_route_drive
    from hybrid_vla_ros.ros.demo import drive_graph
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params
    checkpoint = CONVERTED[model](tmp_path)
    spec = load_vla(checkpoint=checkpoint).spec
    cameras = [f"/test/cam{i}/image" for i in range(spec.num_cameras)]
    osm = tmp_path / "intersection.osm"
    bag = write_route_drive(tmp_path / "drive", spec, cameras, osm, turn="left", frames=FRAMES, compressed=False)
    runs = {}
    for dtype in DTYPES:
        overrides = graph_overrides({"model.checkpoint": checkpoint}, cameras, osm)
        overrides["hybrid_vla_suffix"]["dtype"] = dtype
        summary, runs[dtype] = drive_graph(bag, graph_params(overrides=overrides), settle_s=30)
        assert summary["trajectories"] == FRAMES and not refused(summary), (dtype, summary)
    stamps = sorted(runs["fp32"])
    for dtype in DTYPES[1:]:
        assert sorted(runs[dtype]) == stamps, dtype
        plans = [np.asarray(runs[dtype][s]) for s in stamps]
        assert all(np.isfinite(plan).all() for plan in plans), dtype
        reference = [np.asarray(runs["fp32"][s]) for s in stamps]
        diffs = [np.abs(plan - ref).max() / np.abs(ref).max() for plan, ref in zip(plans, reference)]
        assert max(diffs) < 0.05, (dtype, diffs)   # of the plan's extent (measured: <= 2%; see the docstring)
        assert dtype == "auto" or max(diffs) > 0, f"{dtype}: the same numbers as fp32 (did it run {dtype}?)"
