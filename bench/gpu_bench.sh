#!/usr/bin/env bash
# On the GPU machine: spillway and the PyTorch baseline (../shared/bench/
# torch_llama.py, carried as .shared/) on the same shapes in one run. Prints
# one JSON line per measurement to stdout and to $OUT/bench.jsonl; the caller
# appends them, with the commit, to bench/results/.
# Usage: bench/gpu_bench.sh [config seq batch]   (default: llama3.2-1b 4096 4)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-llama3.2-1b}
seq=${2:-4096}
batch=${3:-4}
out=${OUT:-/tmp}/bench.jsonl
. bench/gpu_env.sh
# Deterministic (the default), with cuDNN's atomic attention backward (as
# PyTorch's flash backward), and with bf16 AdamW moments as well (PyTorch's
# bf16 model keeps bf16 moments, weights and gradients; spillway still keeps
# fp32 master weights and gradients). STEPS sets the timed steps (median);
# MODES (spillway flags per mode, separated by commas) replaces the three.
# Power: nvidia-smi samples power, SM clock and the power-cap throttle every
# 100 ms; bench/power_summary.py splits them by phase (each system's run).
power=${OUT:-/tmp}/power.csv phases=${OUT:-/tmp}/phases.txt
: > "$phases"
nvidia-smi --query-gpu=timestamp,power.draw,power.limit,clocks.sm,clocks_event_reasons.sw_power_cap \
  --format=csv,noheader,nounits -lms 100 > "$power" 2>/dev/null &
sampler=$!
# The sampler may be gone already: a failed kill must not become the exit status.
trap 'kill $sampler 2>/dev/null || true' EXIT
phase() { echo "$(date '+%Y/%m/%d %H:%M:%S.%N') $1" >> "$phases"; }
IFS=, read -ra modes <<< "${MODES:-,--nondeterministic,--nondeterministic --bf16-moments}"
for mode in "${modes[@]}"; do
  phase "spillway${mode:+ $mode}"
  build/gpu/src/spillway bench --config "$config" --seq "$seq" --batch "$batch" --steps "${STEPS:-6}" --warmup 2 \
    --json "$out" $mode | grep -E "median|step [0-9]+:" | tr '\n' ' ' | sed 's/  */ /g'
  echo
done
if [ "$config" = llama3.2-1b ] && [ -f .shared/torch_llama.py ]; then
  # PyTorch times as many steps as spillway: at the power cap the first
  # steps after a pause run faster (docs/performance.md).
  PYTHONUNBUFFERED=1 python3 - "$seq" "$batch" "$phases" "${STEPS:-6}" <<'PY' | tee -a "$out"
import sys, json, datetime
sys.path.insert(0, ".shared")
import torch_llama as t
T, B = int(sys.argv[1]), int(sys.argv[2])
for compiled in (False, True):
    with open(sys.argv[3], "a") as f:
        f.write(datetime.datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f") + (" torch compiled\n" if compiled else " torch eager\n"))
    r = t.run(f"torch-llama1B-T{T}" + ("-compiled" if compiled else ""), 128256, 2048, 16, 32, 8, 8192, T, B, steps=int(sys.argv[4]), compile_=compiled)
PY
fi
phase end
kill $sampler 2>/dev/null || true
python3 bench/power_summary.py "$power" "$phases"
