#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/; in the `sanitize` preset's build:
# clang with AddressSanitizer and UndefinedBehaviorSanitizer) and runs each for SECONDS
# (default 60) from its seed corpus in fuzz/corpus/<harness>/. A crash, a
# sanitizer report, a leak, an exception other than spillway::Error, or one
# input running past 10 s fails the script; the input that did it is left in
# build/sanitize/findings/<harness>/. Inputs the fuzzer found interesting stay in
# build/sanitize/findings/<harness>/corpus, so a second run goes on from there.
#
#   scripts/fuzz.sh                      # every harness, 60 s each (CI)
#   scripts/fuzz.sh 3600 gguf_fuzz       # one harness, an hour
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
scripts/setup.sh
cmake --preset sanitize >/dev/null
cmake --build --preset fuzz

harnesses=("$@")
if ((${#harnesses[@]} == 0)); then
  for f in fuzz/*_fuzz.cc; do harnesses+=("$(basename "$f" .cc)"); done
fi
failed=0
for h in "${harnesses[@]}"; do
  work="build/sanitize/findings/$h"
  mkdir -p "$work/corpus"
  # -rss_limit_mb: a parser that allocates what a hostile size asks for is a
  # finding, not an out-of-memory kill of the machine.
  if build/sanitize/fuzz/"$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$work/" "$work/corpus" "fuzz/corpus/$h" >"$work/log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
    echo "fuzz: $h: ${runs:-?} executions in ${seconds} s, no finding"
  else
    tail -n 60 "$work/log"
    echo "fuzz: $h: FAILED; the input is in $work/ (log: $work/log)"
    failed=1
  fi
done
exit "$failed"
