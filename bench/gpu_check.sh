#!/usr/bin/env bash
# On the GPU machine, one lease: build everything, run every gpu-labelled
# test, the new multi-stream and kernel tests under compute-sanitizer, and
# the 1B step (deterministic and not) with its profile. Logs go to $OUT.
# SANITIZE=0, BENCH=0 and KERNELS=0 leave out the last three parts
# (KERNEL_FILTER picks the element-wise kernel benchmarks).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
. bench/gpu_env.sh
# The data-parallel tests start NCCL: NVLink multicast stays off (it can
# take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
scripts/gpu_build.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 300 > "$OUT/gpu_tests.log" 2>&1
grep -E "tests passed|tests failed|\(Failed\)|\*\*\*" "$OUT/gpu_tests.log"
echo "tests: $(( $(date +%s) - start )) s"
# SANITIZE_TESTS names the test binaries (default: the engines' and the
# kernels; "binary=filter" runs only the gtest filter's tests); racecheck
# skips the engines (no shared memory of their own).
[ "${SANITIZE:-1}" = 0 ] || for t in ${SANITIZE_TESTS:-test_train_cuda_engine_layouts_cuda_test test_ops_attention_cached_cuda_test test_infer_cuda_decoder_cuda_test test_ops_matmul_cuda_test}; do
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    [ "$tool" = racecheck ] && [[ "$t" == test_train_* ]] && continue
    filter=""; [[ "$t" == *=* ]] && filter="--gtest_filter=${t#*=}"
    [ "$t" = test_ops_matmul_cuda_test ] && filter="--gtest_filter=*Addend*:*Accumulates*"
    timeout "${SANITIZE_TIMEOUT:-150}" compute-sanitizer --tool $tool --error-exitcode 3 build/gpu/tests/${t%%=*} $filter > "$OUT/sanitizer.log" 2>&1
    echo "$tool $t: exit $? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.log")"
    grep -m3 -E "Invalid|Race|Error" "$OUT/sanitizer.log" | grep -v "ERROR SUMMARY" | head -3
  done
done
echo "sanitizer: $(( $(date +%s) - start )) s"
# BENCH_MODES: the 1B runs, separated by commas; a mode with --profile also
# times each op (after its timed steps).
IFS=, read -ra modes <<< "${BENCH_MODES:---profile,--nondeterministic --profile,--nondeterministic --no-cuda-graph,--nondeterministic --projections separate}"
[ "${BENCH:-1}" = 0 ] || for mode in "${modes[@]}"; do
  log="$OUT/bench1b$(echo "$mode" | tr -d ' -').log"
  build/gpu/src/spillway bench --config llama3.2-1b --seq 4096 --batch 4 --steps ${STEPS:-6} --warmup 2 --json "$OUT/bench.jsonl" \
    $mode > "$log" 2>&1
  echo "1B $mode:"; grep -E "^  (attention|optimizer|matmul|cross)|median" "$log"
done
echo "bench: $(( $(date +%s) - start )) s"
[ "${KERNELS:-1}" = 0 ] || build/gpu/bench/elementwise_cuda_bench --benchmark_filter="${KERNEL_FILTER:-Copy|RmsNorm|Rope|Swiglu}" \
  > "$OUT/kernels.log" 2>&1 && grep -E "^BM_" "$OUT/kernels.log" | cut -c1-150
