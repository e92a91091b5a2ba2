#!/bin/sh
# The launcher CMake runs every compile through where ccache is installed
# (CMakeLists.txt): ccache, handed the compiler's real path, so that builds
# naming the same compiler otherwise (c++ in the presets, g++ in pip's
# build) share their objects. readlink -f resolves the alternatives' links.
# The cache lives in the checkout's build/ (always writable where the build
# is), shared by every build folder there.
compiler=$(readlink -f "$(command -v "$1")")
shift
export CCACHE_DIR=${CCACHE_DIR:-$(cd "$(dirname "$0")/.." && pwd)/build/ccache}
exec ccache "$compiler" "$@"
