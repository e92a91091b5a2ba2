#!/usr/bin/env bash
# Decoding on one lent GPU (issue 25): the batched, paged CUDA decoder on
# random weights of a model's shape (default LLaMA-3-8B, bf16) at 1, 8 and
# 32 sequences a step, its time to first token for 128- and 2,048-token
# prompts, the continuous-batching engine `serve` runs (no HTTP) at 1, 16
# and 64 streams of 128-token prompts and 256-token answers (output tok/s,
# p50/p99 inter-token gaps, time to first token), and the batch-1
# CudaDecoder (cuBLAS) beside it; then, with
# `tests` among the arguments, the decoder's gpu-labelled tests.
# Builds nothing: first `scripts/gpu_build.sh spillway batch_decode_cuda_bench`
# and, for `tests`, the targets test_<dir>_<name> of the tests $TESTS names.
# Prints one JSON line per measurement (name, batch, tok_s, ms_per_step,
# bandwidth_gb_s; ttft_s for the prompts) and appends them to
# $OUT/results.jsonl, logs beside it.
#   bench/gpu_decode.sh [decode] [tests]          (default: decode)
#   CONFIG=llama3.2-1b BATCHES=1,8,32,64 STREAMS=1,16,64 CONTEXT=512 STEPS=32 bench/gpu_decode.sh
# `serve` among the arguments measures `spillway serve` over HTTP (below).
# `torch` among the arguments runs PyTorch's baseline on the same shape
# (bench/torch_decode.py: transformers generate, eager and static-cache
# compiled). CUDA_GRAPHS=0: decode steps launched kernel by kernel.
# FUSED_EPILOGUES=0: RoPE, SwiGLU and the residual adds in kernels of their
# own, not fused into the adding of the matmuls' slices.
# SPILLWAY_DEPENDENT_LAUNCH=0: every kernel waits for the one before it to
# finish before it starts (device/cuda/dependent_launch.cuh).
# TENSOR_CORES=0: the batched decoder's matmuls on CUDA cores
# (ops/batch_linear.h), not tensor cores; `linear` among the arguments runs
# batch_linear_cuda_bench (both kernels alone, every shape and row count).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. bench/gpu_env.sh
# NVLink multicast stays off: it can take a shared host's GPUs out of service.
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1
touch "$OUT/results.jsonl"
TESTS="batch_linear|paged_cache_cuda|cuda_batch_decoder|step_passes|llama_batch_decoder|cuda_decoder|rope_cuda"
TESTS="$TESTS|cross_entropy_cuda|rmsnorm_cuda|serve_cuda"

phase_torch() {
  timeout "${TORCH_TIMEOUT:-400}" /opt/torch/.venv/bin/python bench/torch_decode.py --shape "${CONFIG:-llama3-8b}" \
    2> "$OUT/torch_decode.log" | tee -a "$OUT/results.jsonl"
}

phase_linear() {
  local bench=build/gpu/bench/batch_linear_cuda_bench
  [ -x $bench ] || { echo "linear: $bench is not built (scripts/gpu_build.sh batch_linear_cuda_bench)"; return 1; }
  $bench | tee "$OUT/batch_linear.txt"
}

phase_decode() {
  local bench=build/gpu/bench/batch_decode_cuda_bench
  [ -x $bench ] || { echo "decode: $bench is not built (scripts/gpu_build.sh batch_decode_cuda_bench)"; return 1; }
  # Stopped before a 10-minute call ends, so what it measured is still shown.
  timeout "${BENCH_TIMEOUT:-540}" $bench --config "${CONFIG:-llama3-8b}" --batches "${BATCHES:-1,8,32}" --context "${CONTEXT:-512}" \
    --steps "${STEPS:-32}" --warmup 4 --prompts "${PROMPTS:-128,2048}" --streams "${STREAMS:-1,16,64}" \
    --tensor-cores "${TENSOR_CORES:-1}" --cuda-graphs "${CUDA_GRAPHS:-1}" \
    --fused-epilogues "${FUSED_EPILOGUES:-1}" > "$OUT/decode.jsonl" 2> "$OUT/decode.log"
  local rc=$?
  # What was measured is kept even when a later measurement failed.
  cat "$OUT/decode.log"
  local commit
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  # Each line with the commit and the GPU, kept and shown.
  while read -r line; do
    echo "${line%\}}, \"commit\": \"$commit\", \"device\": \"$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)\"}"
  done < "$OUT/decode.jsonl" | tee -a "$OUT/results.jsonl"
  return $rc
}

# `spillway serve --device cuda` over HTTP under bench/serve_load.py: a
# random model folder of the shape (bench/make_random_model.py, made once
# into $MODEL_DIR), then output tokens/s, time to first token and
# inter-token gaps at each level of $STREAMS, greedy or at $TEMPERATURE.
phase_serve() {
  local dir=${MODEL_DIR:-/tmp/spillway-random-${CONFIG:-llama3-8b}} py=/opt/torch/.venv/bin/python
  [ -f "$dir/tokenizer.json" ] || (cd bench && $py make_random_model.py --shape "${CONFIG:-llama3-8b}" --out "$dir" \
    --device cuda) || { echo "serve: could not make $dir"; return 1; }
  build/gpu/src/spillway serve -m "$dir" --port 0 --parallel 64 --device cuda > "$OUT/serve.log" 2>&1 &
  local server=$! port=""
  for _ in $(seq 600); do
    port=$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$OUT/serve.log" | head -1 | cut -d: -f3)
    [ -n "$port" ] && break
    kill -0 $server 2>/dev/null || break
    sleep 0.5
  done
  [ -n "$port" ] || { echo "serve: did not start"; tail -5 "$OUT/serve.log"; kill $server 2>/dev/null; return 1; }
  timeout "${SERVE_TIMEOUT:-300}" $py bench/serve_load.py --url "http://127.0.0.1:$port" --streams "${STREAMS:-1,16,64}" \
    --prompt-tokens 128 --max-tokens 256 --vocab-floor 1000 --vocab-ceiling 100000 --temperature "${TEMPERATURE:-0}" |
    tee -a "$OUT/results.jsonl"
  kill -TERM $server; wait $server
  echo "serve exited $?"
}

phase_tests() {
  # The decoder's tests, and those of the kernels it changed (rope,
  # cross_entropy and rmsnorm share ops/bf16x8.cuh) and of the batch-1
  # decoder it shares its upload with.
  ctest --test-dir build/gpu -R "$TESTS" --output-on-failure --timeout 300 > "$OUT/decode_tests.log" 2>&1
  grep -E "tests passed|tests failed|\(Failed\)|\*\*\*|Passed|Skipped" "$OUT/decode_tests.log"
}

for phase in ${*:-decode}; do
  phase_$phase
  echo "$phase: $(( $(date +%s) - start )) s"
done
