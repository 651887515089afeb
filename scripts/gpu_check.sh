#!/usr/bin/env bash
# Prepared GPU check (under 5 minutes): verify the split with the prefix on CUDA, then bench native /
# serial / pipelined (+ accelerate device_map peer if installed) and report GPU peak memory per mode.
# Usage: scripts/gpu_check.sh [OUT_DIR]   (needs CUDA; run scripts/setup.sh first, or have torch+deps)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
"$PY" - <<'PYEOF'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu_check: torch.cuda.is_available() is False; this check needs a GPU")
print("gpu_check:", torch.cuda.get_device_name(0), "torch", torch.__version__)
PYEOF
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 60 "$PY" -m hybrid_vla_ros.cli verify --preset tiny --prefix-device cuda --tolerance 1e-4 --json > "$OUT/verify_tiny_cuda.json"
timeout 60 "$PY" -m hybrid_vla_ros.cli verify --preset tiny-llava --prefix-device cuda --tolerance 1e-4 --json > "$OUT/verify_tiny_llava_cuda.json"
# an Alpamayo release's prefix on the GPU (fp32 / bf16 / fp16) beside a CPU suffix, in the graph
timeout 240 "$PY" -m pytest -q -rs -s test/test_alpamayo_gpu.py | tee "$OUT/alpamayo_gpu.txt"
# the trained driving model with its prefix on the GPU: ADE vs native (CPU, fp32) and the largest difference
timeout 200 "$PY" -m hybrid_vla_ros.cli eval --checkpoint builtin:drive --drives 10 --seed 0 --prefix-device cuda \
  --json "$OUT/eval_drive_cuda.json" > "$OUT/eval_drive_cuda.txt"
tail -5 "$OUT/eval_drive_cuda.txt"
timeout 150 "$PY" -m hybrid_vla_ros.cli bench --preset bench --prefix-device cuda --dtype fp16 --suffix-dtype bf16 \
  --frames 20 --json "$OUT/bench_cuda.json" --plot "$OUT/bench_cuda.png" > "$OUT/bench_cuda_headline.json"
"$PY" - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
for name in ("verify_tiny_cuda", "verify_tiny_llava_cuda"):
    r = json.load(open(f"{out}/{name}.json"))
    print(f"{name}: max_abs_diff {r['max_abs_diff']:.2e} over partitions 0..{r['num_blocks']}")
r = json.load(open(f"{out}/bench_cuda.json"))
print(f"bench p={r['partition']}: speedup pipelined vs native {r['speedup_pipelined_vs_native']:.2f}x")
for mode, m in r["modes"].items():
    peak = m.get("gpu_peak_bytes")
    print(f"  {mode:24s} period p50 {m['period_ms']['p50'] or 0:8.1f} ms  "
          f"gpu peak {peak / 2**20 if peak else float('nan'):8.1f} MiB")
PYEOF
