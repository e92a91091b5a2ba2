#!/usr/bin/env bash
# Fills .deps/ with what the GPU machine lacks and cannot download: PCRE2's and ICU's
# development files (.debs), toml++'s headers (a .deb; spillway uses it
# header-only), cpp-httplib (header, shared library, and the OpenSSL, zlib and
# brotli headers its header includes) and the cuDNN frontend headers (from .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/cudnn_frontend
(cd .deps && apt-get download libpcre2-dev libpcre2-8-0 libtomlplusplus-dev libicu-dev libicu72 \
  libcpp-httplib-dev libcpp-httplib0.11 libssl-dev libssl3 zlib1g-dev libbrotli-dev libbrotli1 2>/dev/null)
cp -r .venv/lib/python3*/site-packages/include .deps/cudnn_frontend/
