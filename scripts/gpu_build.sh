#!/usr/bin/env bash
# Builds spillway on the lent GPU machine (Ubuntu, PyTorch's venv holding
# cuDNN and NCCL, no network) into build/gpu. Arguments are ninja targets
# (default: everything). Needs the carried folder .deps/ (pcre2 and toml++
# .debs and the cuDNN frontend headers, made by scripts/gpu_deps.sh on a
# machine with network).
set -euo pipefail
cd "$(dirname "$0")/.."
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
deps=/tmp/spillway-deps
mkdir -p "$deps"
for f in .deps/*.deb; do dpkg -x "$f" "$deps"; done
export LD_LIBRARY_PATH=$N/cudnn/lib:$N/nccl/lib:$N/cu13/lib:$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPILLWAY_CUDA=ON \
  -DSPILLWAY_CUDNN_ROOT=$N/cudnn -DSPILLWAY_NCCL_ROOT=$N/nccl \
  -DSPILLWAY_CUDNN_FRONTEND_INCLUDE="$PWD/.deps/cudnn_frontend/include" \
  -DCMAKE_PREFIX_PATH="$deps/usr" \
  -DSPILLWAY_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" >/dev/null
ninja -C build/gpu "$@"
