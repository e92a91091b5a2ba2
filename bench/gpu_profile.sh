#!/usr/bin/env bash
# On the GPU machine: build the command line, profile the 1B step by op kind,
# print the planner's prediction for the same step, and run the fast GPU
# tests under compute-sanitizer (memcheck and racecheck). Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
. bench/gpu_env.sh
scripts/gpu_build.sh spillway $(cd tests/ops && ls *_cuda_test.cc | grep -v -e attention -e matmul | sed 's/^/test_ops_/; s/\.cc$//') > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
build/gpu/src/spillway bench --config llama3.2-1b --seq 4096 --batch 4 --steps 3 --warmup 2 --profile 2>&1 | tee "$OUT/profile.log" | grep -v "  step"
build/gpu/src/spillway plan --config llama3.2-1b --seq 4096 --batch 4 | tail -3
for t in build/gpu/tests/test_ops_*_cuda_test; do
  for tool in memcheck racecheck; do
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 3 "$t" > "$OUT/sanitizer.log" 2>&1
    echo "$tool $(basename "$t"): exit $? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.log")"
  done
done
