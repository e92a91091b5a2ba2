// The pieces of the `spillway._spillway` module, one file each; module.cc
// puts them together. The Python package (python/spillway/__init__.py)
// re-exports them under their public names.
#pragma once

#include <nanobind/nanobind.h>

#include "train/run_config.h"

namespace spillway::python {

// A run configuration and the command whose defaults and fields it has.
struct RunConfigObject {
  train::RunConfig config;
  train::Command command = train::Command::train;
};

void bind_errors(nanobind::module_& m);
void bind_run_config(nanobind::module_& m);
void bind_training(nanobind::module_& m);
void bind_plan(nanobind::module_& m);
void bind_model(nanobind::module_& m);

}  // namespace spillway::python
