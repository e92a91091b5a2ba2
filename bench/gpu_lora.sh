#!/usr/bin/env bash
# On the GPU machine: LoRA and QLoRA fine-tuning steps of the LLaMA-3-8B
# shape (random weights), rank 16 on all seven projections, with spillway
# (`spillway bench --lora-rank`) and, where transformers + peft (and for
# QLoRA bitsandbytes) import in PyTorch's venv, PEFT on the same shape in
# the same lease (bench/peft_lora.py; a missing package is a JSON line
# saying so, never an install: the machine has no network). One JSON line
# per measurement (name, tok_s, mfu, peak_device_bytes, and what each
# system adds) to stdout and to $OUT/lora.jsonl; the caller appends them,
# with the commit, to bench/results/.
# Usage: bench/gpu_lora.sh [seq] [config]   (default: 4096 llama3-8b)
# RUNS picks some of lora,qlora-nf4,qlora-nf4dq,peft-lora,peft-qlora (all by
# default; an 8B start takes a minute, so a 10-minute call holds about four).
# Needs build/gpu/src/spillway (scripts/gpu_build.sh spillway).
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-4096}
config=${2:-llama3-8b}
out=${OUT:-/tmp}/lora.jsonl
steps=${STEPS:-6}
. bench/gpu_env.sh
python=/opt/torch/.venv/bin/python
[ -x "$python" ] || python=python3
lora="--lora-rank 16 --lora-alpha 32 --lora-targets all"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

# spillway's line of bench's JSON, named and cut to what the comparison needs.
spillway_run() {
  local name=$1; shift
  : > "$raw"
  if build/gpu/src/spillway bench --config "$config" --seq "$seq" --batch 1 --steps "$steps" --warmup 2 \
       $lora --json "$raw" "$@" | grep -E "^bench:|median|step [0-9]+:|start-up"; then
    "$python" - "$name" "$raw" <<'PY' | tee -a "$out"
import json, sys
r = json.loads(open(sys.argv[2]).read().splitlines()[-1])
r = {"name": sys.argv[1], "system": "spillway", "tok_s": round(r["tok_s"], 1), "mfu": r["mfu"],
     "peak_device_bytes": r["peak_device_bytes"], "step_s": r["step_s"], "seq": r["seq"], "batch": r["batch"],
     "lora": r["lora"], "device": r["device"], "startup_s": r["startup_s"], "cuda_graph": r["cuda_graph"]}
print(json.dumps(r))
PY
  else
    echo "{\"name\": \"$name\", \"system\": \"spillway\", \"error\": \"exit status $?\"}" | tee -a "$out"
  fi
}

runs=",${RUNS:-lora,qlora-nf4,qlora-nf4dq,peft-lora,peft-qlora},"
wanted() { [[ "$runs" == *",$1,"* ]]; }
wanted lora && spillway_run "spillway-lora-$config-s$seq"
wanted qlora-nf4 && spillway_run "spillway-qlora-nf4-$config-s$seq" --lora-base nf4
wanted qlora-nf4dq && spillway_run "spillway-qlora-nf4dq-$config-s$seq" --lora-base nf4-dq
# bench/peft_lora.py builds LLaMA-3-8B's shape.
if [ "$config" = llama3-8b ]; then
  wanted peft-lora && "$python" bench/peft_lora.py --name "peft-lora-$config-s$seq" --seq "$seq" --steps "$steps" |
    tee -a "$out"
  wanted peft-qlora && "$python" bench/peft_lora.py --name "peft-qlora-nf4-$config-s$seq" --seq "$seq" \
    --steps "$steps" --qlora | tee -a "$out"
fi
exit 0
