// `import spillway`: the library's run configuration, training, planning
// and models, in-process (not the command line run as a subprocess).
#include <nanobind/nanobind.h>

#include "python/src/bindings.h"

NB_MODULE(_spillway, m) {
  m.doc() = "spillway's library: run configurations, training, plans and models";
  spillway::python::bind_errors(m);
  spillway::python::bind_run_config(m);
  spillway::python::bind_training(m);
  spillway::python::bind_plan(m);
  spillway::python::bind_model(m);
}
