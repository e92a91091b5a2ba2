#!/usr/bin/env bash
# One lease of the GPU machine, in order: build, the gpu-labelled tests, the
# 1B benchmark beside PyTorch, a default-model training run on the GPU, and
# greedy generation from it on the CPU and the GPU.
# Logs go to $OUT. Carry .deps and .shared with the call.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. bench/gpu_env.sh
# The data-parallel tests start NCCL: NVLink multicast stays off (it can
# take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
start=$(date +%s)
scripts/gpu_build.sh ${SPILLWAY_TARGETS:-} > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 300 > "$OUT/gpu_tests.log" 2>&1
grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/gpu_tests.log"
echo "tests: $(( $(date +%s) - start )) s"
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  bench/gpu_bench.sh llama3.2-1b 4096 4 > "$OUT/bench.log" 2>&1
  tail -5 "$OUT/bench.log"
  echo "bench: $(( $(date +%s) - start )) s"
fi
if [ "${SKIP_TRAIN:-0}" != 1 ] && [ -d .deps/fortunes-data ]; then
  build/gpu/src/spillway train --data .deps/fortunes-data --out /tmp/run-gpu --sample-tokens 80 > "$OUT/train_gpu.log" 2>&1
  tail -12 "$OUT/train_gpu.log"
  cp /tmp/run-gpu/train_log.jsonl "$OUT/train_gpu_log.jsonl" 2>/dev/null
  echo "train: $(( $(date +%s) - start )) s"
  # Greedy generation from the trained model on both devices: the same text
  # except where the CPU's two likeliest tokens are nearly tied.
  for dev in cpu cuda; do
    build/gpu/src/spillway generate --model /tmp/run-gpu --prompt "The" --max-tokens 120 --temperature 0 \
      --device $dev --stats > "$OUT/generate_$dev.txt" 2> "$OUT/generate_$dev.stats"
    echo "generate $dev: $(tail -1 "$OUT/generate_$dev.stats")"
  done
  cmp -s "$OUT/generate_cpu.txt" "$OUT/generate_cuda.txt" && echo "greedy text: identical" || echo "greedy text: differs"
fi
