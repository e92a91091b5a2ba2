#!/usr/bin/env bash
# `pip install .` builds the package with the project's CMake through
# scikit-build-core, and what it installs imports and runs. It installs into
# a scratch folder, not the venv, so that the venv never holds a stale copy;
# its build folder (build/pip/) is kept, so a second run rebuilds only what
# changed. Usage: pip_install.sh PYTHON (a Python with pip, nanobind and
# scikit-build-core: the build uses them, not an isolated environment).
set -euo pipefail
python=$1
cd "$(dirname "$0")/../.."
target=$(mktemp -d)
trap 'rm -rf "$target"' EXIT
"$python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps --target "$target" .
cd "$target"  # away from the checkout, whose python/spillway has no native module
PYTHONPATH="$target" "$python" - "$target" <<'PY'
import sys
import spillway
assert spillway.__file__.startswith(sys.argv[1]), spillway.__file__
config = spillway.RunConfig(command="plan", device_mem="80GiB", seq=1024)
plan = spillway.plan(config)
assert plan.step_seconds > 0 and plan.timeline_svg.startswith("<svg")
try:
    spillway.RunConfig(steps="ten")
    raise SystemExit("a bad setting raised nothing")
except spillway.Error as e:
    assert str(e) == 'RunConfig: schedule.steps is "ten"; expected a whole number', str(e)
print("installed:", spillway.__file__, plan)
PY
