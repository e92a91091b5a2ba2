set -uo pipefail
export NCCL_NVLS_ENABLE=0
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH=$N/cudnn/lib:$N/nccl/lib:$N/cu13/lib:/tmp/spillway-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
scripts/gpu_build.sh spillway test_train_cuda_engine_layouts_cuda_test test_e2e_data_parallel_cuda_test > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
ctest --test-dir build/gpu -R "cuda_engine_layouts|data_parallel_cuda" --output-on-failure --timeout 300 > $OUT/tests.log 2>&1
grep -E "tests passed|tests failed|Failed|FAILED|Failure" $OUT/tests.log | head -20
echo "tests $(( $(date +%s) - t0 )) s"
BUILD=0 NPROC=4 bash bench/gpu_sharding.sh resume 2>&1 | tail -8
echo "resume $(( $(date +%s) - t0 )) s"
B=build/gpu/src/spillway
$B bench --config llama3-8b --seq 8192 --batch 1 --grad-accum 8 --steps 3 --warmup 1 --recompute auto --nproc-per-node 4 --shard auto --json $OUT/results.jsonl > $OUT/8b-4.log 2>&1; grep -E "median|planned" $OUT/8b-4.log
echo "8b $(( $(date +%s) - t0 )) s"
