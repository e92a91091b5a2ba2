#!/usr/bin/env bash
# A/B on the GPU machine: a step (by default the 1B step, seq 4096, batch 4;
# SHAPE replaces those bench flags, WARMUP the 2 untimed steps) under each of
# MODES (bench flags and NAME=value environment settings, modes separated
# by commas), alternated ROUNDS times, so that
# clock and power drift fall on every mode alike; step times swing by ±3%
# with the data and the power limit, more than many changes are worth.
# Prints every run's median and mean step and the mean of each mode's means.
# Builds first unless BUILD=0. JSON lines go to $OUT/ab.jsonl.
# A mode's SPILLWAY_BIN=path runs that binary instead of the tree's, to
# compare commits in one lease: e.g. `git archive <commit> | tar -x -C
# .scratch/base` on the dev machine, carry .scratch, and build it there
# first with `(cd .scratch/base && ln -s ../../.deps . && scripts/gpu_build.sh spillway)`.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
. bench/gpu_env.sh
[ "${BUILD:-1}" = 0 ] || scripts/gpu_build.sh spillway > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
IFS=, read -ra modes <<< "${MODES:?MODES: bench flags per mode, separated by commas}"
: > "$OUT/ab.jsonl"  # the summary takes every mode-th line from here
for round in $(seq "${ROUNDS:-3}"); do
  for i in "${!modes[@]}"; do
    # A mode's NAME=value words set environment variables; the rest are flags.
    envs=() flags=() bin=build/gpu/src/spillway
    for word in ${modes[$i]}; do
      if [[ "$word" == SPILLWAY_BIN=* ]]; then bin=${word#SPILLWAY_BIN=}
      elif [[ "$word" =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$word")
      else flags+=("$word"); fi
    done
    env "${envs[@]}" "$bin" bench ${SHAPE:---config llama3.2-1b --seq 4096 --batch 4} --steps "${STEPS:-12}" \
      --warmup "${WARMUP:-2}" --json "$OUT/ab.jsonl" "${flags[@]}" > "$OUT/ab_run.log" 2>&1 || { tail -5 "$OUT/ab_run.log"; exit 1; }
    echo "round $round mode $i (${modes[$i]}): $(tail -1 "$OUT/ab.jsonl" | python3 -c \
      'import json,sys; j=json.load(sys.stdin); print("median %.1f ms, mean %.1f ms" % (j["step_s"]*1e3, j["mean_step_s"]*1e3))')"
  done
done
python3 - "$OUT/ab.jsonl" "${#modes[@]}" <<'EOF'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
modes = int(sys.argv[2])
for i in range(modes):
    mine = runs[i::modes]
    mean = sum(r["mean_step_s"] for r in mine) / len(mine)
    median = sum(r["step_s"] for r in mine) / len(mine)
    print(f"mode {i}: {len(mine)} runs, mean of means {mean*1e3:.1f} ms, mean of medians {median*1e3:.1f} ms, "
          f"{sum(r['mean_tok_s'] for r in mine) / len(mine):.0f} tok/s, MFU {sum(r['mfu'] for r in mine) / len(mine):.3f}")
EOF
