#!/bin/sh
# The launcher CMake runs every compile through where ccache is installed
# (CMakeLists.txt): ccache, handed the compiler's real path, so that builds
# naming the same compiler otherwise (c++ in the presets, g++ in pip's
# build) share their objects. readlink -f resolves the alternatives' links.
compiler=$(readlink -f "$(command -v "$1")")
shift
exec ccache "$compiler" "$@"
