#!/usr/bin/env bash
# On the GPU machine: LLaMA-3-8B at seq 8192 trained by the planned engine.
# First `spillway plan`'s prediction, then the measured steps, then one
# profiled micro-batch whose per-stream timeline goes to $OUT.
# Usage: [STEPS=n] [BATCH=b] [PROFILE=0] bench/gpu_offload.sh DEVICE_MEM GRAD_ACCUM [flags for plan and bench]
set -uo pipefail
cd "$(dirname "$0")/.."
mem=${1:-80GiB}
accum=${2:-32}
shift 2 || true
OUT=${OUT:-/tmp/out}
. bench/gpu_env.sh
B=build/gpu/src/spillway
batch=${BATCH:-1}
tag=8b-${mem}-b${batch}-x${accum}
profile="--profile --timeline $OUT/timeline-$tag.svg"
[ "${PROFILE:-1}" = 0 ] && profile=""
free -g | head -2
$B plan --config llama3-8b --seq 8192 --batch "$batch" --grad-accum "$accum" --device-mem "$mem" --host-mem 110GiB \
  --svg "$OUT/plan-$tag.svg" "$@" | tee "$OUT/plan-$tag.txt"
/usr/bin/time -v $B bench --config llama3-8b --seq 8192 --batch "$batch" --grad-accum "$accum" --steps ${STEPS:-2} --warmup 1 \
  --device-mem "$mem" --host-mem 110GiB --nondeterministic --offload on --json "$OUT/bench.jsonl" $profile "$@" \
  > "$OUT/bench-$tag.log" 2>&1
tail -8 "$OUT/bench-$tag.log"; grep -E "Maximum resident|Elapsed" "$OUT/bench-$tag.log"
