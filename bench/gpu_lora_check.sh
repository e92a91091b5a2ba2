#!/usr/bin/env bash
# On the GPU machine, one lease (with carry: [".deps"]): build what LoRA and
# QLoRA on the GPU need, run their gpu-labelled tests, the NF4 kernel and
# the LoRA engine under compute-sanitizer's memcheck, then
# bench/gpu_lora.sh (LLaMA-3-8B shape beside PEFT). Logs and JSON lines go
# to $OUT. SANITIZE=0 and BENCH=0 leave out the last two parts; SEQ sets the
# bench's sequence (default 4096).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. bench/gpu_env.sh
# The two-GPU test starts NCCL: NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
tests="test_ops_nf4_cuda_test test_train_cuda_lora_engine_cuda_test test_e2e_lora_cuda_test test_train_lora_plan_test"
scripts/gpu_build.sh spillway $tests > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
ctest --test-dir build/gpu -R 'ops/nf4_cuda_test|train/cuda_lora_engine_cuda_test|e2e/lora_cuda_test|train/lora_plan_test' \
  --output-on-failure --timeout 300 > "$OUT/lora_tests.log" 2>&1
grep -E "tests passed|tests failed|\(Failed\)|\*\*\*|Failure|Expected|Which is|actual" "$OUT/lora_tests.log" | head -60
echo "tests: $(( $(date +%s) - start )) s"
[ "${SANITIZE:-1}" = 0 ] || for t in "test_ops_nf4_cuda_test" "test_train_cuda_lora_engine_cuda_test=*RoundTrip*"; do
  filter=""; [[ "$t" == *=* ]] && filter="--gtest_filter=${t#*=}"
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 build/gpu/tests/${t%%=*} $filter \
    > "$OUT/sanitizer_${t%%=*}.log" 2>&1
  echo "memcheck $t: exit $? $(grep -m1 'ERROR SUMMARY' "$OUT/sanitizer_${t%%=*}.log")"
done
echo "sanitizer: $(( $(date +%s) - start )) s"
[ "${BENCH:-1}" = 0 ] || OUT="$OUT" bash bench/gpu_lora.sh "${SEQ:-4096}"
echo "all: $(( $(date +%s) - start )) s"
