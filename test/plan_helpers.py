"""A described workload and pair of sides for the planner's tests (test_plan.py, test_plan_chunks.py): numbers
given, nothing timed."""

from hybrid_vla_ros.plan.efficiency import Rate
from hybrid_vla_ros.plan.predict import Sides
from hybrid_vla_ros.plan.workload import FrontEnd, Workload


def workload(**kw):
    base = dict(name="w", num_blocks=8, hidden=512, heads=8, kv_heads=2, intermediate=1024, tokens=100,
                front=FrontEnd("front", flops=2e9, params=1_000_000, activation_elems=1e5), embed_params=200_000,
                head_params=300_000, head_flops=1e6)
    return Workload(**{**base, **kw})


def sides(gpu_gflops=1000.0, cpu_gflops=250.0, **kw):
    base = dict(prefix=Rate("gpu", "fp32", gpu_gflops, 500.0), suffix=Rate("cpu", "bf16", cpu_gflops, 50.0),
                prefix_itemsize=4, suffix_itemsize=2, link_gbs=20.0, link_latency_ms=0.05, context_bytes=2**29)
    return Sides(**{**base, **kw})
