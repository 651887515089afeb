#!/usr/bin/env bash
# The planner against a real GPU (prepared, NOT YET RUN: no GPU was lent when it was written). Under 10 minutes
# on one H200: at the largest real-size preset that fits, in bf16 on both sides,
#   1. hybrid-vla plan --gpu this       blocks timed on the GPU and on the suffix cores (the measured plan)
#   2. hybrid-vla plan --gpu h200       the same from the H200's datasheet peak and the stated efficiencies
#   3. the GPU's own GEMM ceiling       what the assumed GEMM / peak (plan/efficiency.py) should have been
#   4. bench native, then pipelined     each in its own process (GPU memory is the mode's own), nvidia-smi
#                                       sampled beside torch's peak (the CUDA context and allocator cache too)
#   5. chunked prefill (issue 29)       serial, pipelined and pipelined_chunked (k = 4) at the cut with the
#                                       real GPU prefix: latency against serial where the prefix is not a CPU core
#   6. summary.json                     each prediction beside its measurement
# Usage: scripts/gpu_plan_check.sh [OUT_DIR] (default docs/results/gpu/plan_check); PRESET=name to choose one.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/results/gpu/plan_check}
mkdir -p "$OUT"
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
CLI=("$PY" -m hybrid_vla_ros.cli)
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_plan_check: no CUDA device')" || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.csv" 2>/dev/null || true

# The largest real-size preset whose bf16 weights take at most 60% of the GPU (parameters from the shapes).
CANDIDATES=$("$PY" - <<'PYEOF'
import os, torch
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.presets import PRESETS
free = torch.cuda.mem_get_info()[1]
sizes = []
for name, spec in PRESETS.items():
    if spec.real_size and (not os.environ.get("PRESET") or name == os.environ["PRESET"]):
        params = sum(p.numel() for p in load_vla(preset=name, shapes_only=True).parameters())
        if 2 * params <= 0.6 * free:
            sizes.append((params, name))
print(" ".join(name for _, name in sorted(sizes, reverse=True)))
PYEOF
)
echo "gpu_plan_check: candidates (largest first): $CANDIDATES"
PRESET_USED=""
for P in $CANDIDATES; do   # the first that plans on this GPU (a failure falls back to the next)
  if timeout 120 "${CLI[@]}" plan --preset "$P" --gpu this --dtype bf16 --suffix-dtype bf16 \
       --json "$OUT/plan_this.json" > "$OUT/plan_this.txt" 2> "$OUT/plan_this.err"; then
    PRESET_USED=$P; break
  fi
  echo "gpu_plan_check: plan failed for $P (see $OUT/plan_this.err), trying the next"
done
[ -n "$PRESET_USED" ] || { echo "gpu_plan_check: no preset could be planned"; exit 1; }
echo "$PRESET_USED" > "$OUT/preset.txt"
timeout 90 "${CLI[@]}" plan --preset "$PRESET_USED" --gpu h200 --cpu this --dtype bf16 --suffix-dtype bf16 \
  --json "$OUT/plan_h200.json" > "$OUT/plan_h200.txt" 2>&1
P_CUT=$("$PY" -c "import json; print(json.load(open('$OUT/plan_this.json'))['best_p'])")
echo "gpu_plan_check: $PRESET_USED, measured plan's cut p = $P_CUT"

timeout 45 "$PY" - "$PRESET_USED" "$OUT" <<'PYEOF'
import json, sys, torch
from hybrid_vla_ros.bench.kernels.roofline import gemm_ceiling_gflops
from hybrid_vla_ros.model.presets import get_preset
spec, out = get_preset(sys.argv[1]), sys.argv[2]
free, total = torch.cuda.mem_get_info()
rows = {str(d).replace("torch.", ""): gemm_ceiling_gflops(2048, spec.hidden_size, spec.intermediate_size, d, "cuda")
        for d in (torch.bfloat16, torch.float32)}
json.dump({"gemm_gflops": rows, "shape": [2048, spec.hidden_size, spec.intermediate_size],
           "context_bytes_after_init": total - free}, open(f"{out}/gemm_ceiling.json", "w"), indent=2)
PYEOF

bench_mode() {   # name modes partition [extra args]: one bench process, nvidia-smi sampled every 200 ms beside it
  local name=$1 modes=$2 cut=$3; shift 3
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$OUT/smi_$name.csv" 2>/dev/null &
  SMI=$!
  timeout 150 "${CLI[@]}" bench --preset "$PRESET_USED" --prefix-device cuda --dtype bf16 --suffix-dtype bf16 \
    --modes "$modes" --transports inproc --partition "$cut" --frames 12 --warmup 2 --no-peer "$@" \
    --json "$OUT/bench_$name.json" > "$OUT/bench_$name.txt" 2>&1
  kill "$SMI" 2>/dev/null; wait "$SMI" 2>/dev/null
}
bench_mode native native 0
bench_mode pipelined pipelined "$P_CUT"
bench_mode chunked serial,pipelined,pipelined_chunked "$P_CUT" --chunks 4

"$PY" - "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def load(name):
    path = out / name
    return json.loads(path.read_text()) if path.is_file() else None
def smi_peak(mode):
    path = out / f"smi_{mode}.csv"
    values = [float(v) for v in path.read_text().split()] if path.is_file() else []
    return max(values) * 2**20 if values else None
measured_plan, described, gemm = load("plan_this.json"), load("plan_h200.json"), load("gemm_ceiling.json")
p = measured_plan["best_p"]
summary = {"preset": (out / "preset.txt").read_text().strip(), "partition": p, "gemm_ceiling": gemm,
           "note": "planned: predicted period / GPU bytes at the cut; bench: measured p50 and peaks"}
for mode in ("native", "pipelined"):
    bench = load(f"bench_{mode}.json")
    run = (bench or {}).get("modes", {}).get(mode, {})
    summary[mode] = {"measured_period_ms": (run.get("period_ms") or {}).get("p50"),
                     "measured_latency_ms": (run.get("latency_ms") or {}).get("p50"),
                     "torch_peak_bytes": run.get("gpu_peak_bytes"), "nvidia_smi_peak_bytes": smi_peak(mode)}
    for name, plan in (("measured_plan", measured_plan), ("h200_datasheet_plan", described)):
        row = plan["native"] if mode == "native" else plan["rows"][p]
        summary[mode][name] = {"period_ms": row["period_ms"], "latency_ms": row["latency_ms"],
                               "gpu_bytes": row["gpu_bytes"]["total"]}
chunked = (load("bench_chunked.json") or {}).get("modes", {})
summary["chunked_k4"] = {mode: {key: (chunked.get(mode, {}).get(key) or {}).get("p50") for key in ("period_ms", "latency_ms")}
                         for mode in ("serial", "pipelined", "pipelined_chunked")}
(out / "summary.json").write_text(json.dumps(summary, indent=2))
print(json.dumps(summary, indent=2))
PYEOF
