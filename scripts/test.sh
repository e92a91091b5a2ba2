#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite. GPU tests (label `gpu`) skip
# themselves on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
preset=${SPILLWAY_PRESET:-release}
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
ctest --preset "$preset" -j "$(nproc)" "$@"
