#!/usr/bin/env bash
# Sets up, builds, and runs the main job: `spillway train` with its defaults
# (a tiny LLaMA on the English fortunes corpus, on the GPU if there is one,
# else the CPU). Extra arguments go to `spillway train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
preset=${SPILLWAY_PRESET:-release}
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" --target spillway
exec "build/$preset/src/spillway" train "$@"
