"""Which cut for my car: the partition planner (no ROS).

From a model's shapes (workload.py), the hardware (hardware.py: this machine measured, or published parts) and
the efficiency of real-shape blocks measured here (measure.py, efficiency.py), predict for every cut p the
prefix, transfer and suffix time, period, latency and the bytes each device holds, the best p under a GPU
memory budget and its dynamic zone, and native GPU-only (predict.py); with chunked prefill across the cut,
the period and latency per chunking at the best cut (chunks.py); for a decode-heavy model (Alpamayo), the
prefill, decode and expert phases per side and whether the split pays as the reasoning grows (decode_heavy.py).
paper.py checks it against the paper's table; `hybrid-vla plan` prints it; the scheduler's cost model and
`bench` take their prior from it.
"""
