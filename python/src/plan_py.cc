// spillway.plan(): the plan `spillway plan` prints, as an object: memory
// per GPU, traffic, the predicted step and its timeline as SVG text.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "base/status.h"
#include "graph/recompute.h"
#include "python/src/bindings.h"
#include "train/run_plan.h"

namespace nb = nanobind;

namespace spillway::python {

namespace {

train::RunPlan plan(const RunConfigObject& run, int gpus, const std::string& gpu, bool auto_batch, bool largest) {
  train::RunPlanOptions options;
  options.gpus = gpus;
  options.gpu = gpu;
  options.batch_auto = auto_batch;
  options.largest = largest;
  nb::gil_scoped_release no_gil;
  return train::plan_run(run.config, options);
}

const plan::TrainingPlan& p(const train::RunPlan& r) { return r.plan(); }

}  // namespace

void bind_plan(nb::module_& m) {
  using train::RunPlan;
  nb::class_<RunPlan>(m, "Plan", "A training step planned before it runs (docs/offload.md); figures are per GPU.")
      .def_ro("name", &RunPlan::name, "The model, or the largest that fits with its layer count.")
      .def_prop_ro("layers", [](const RunPlan& r) { return r.request.config.num_hidden_layers; })
      .def_prop_ro("parameters", [](const RunPlan& r) { return p(r).parameters; })
      .def_prop_ro("batch", [](const RunPlan& r) { return r.request.batch; }, "Sequences per micro-batch.")
      .def_prop_ro("seq", [](const RunPlan& r) { return r.request.seq; })
      .def_prop_ro("micro_batches", [](const RunPlan& r) { return r.request.micro_batches; },
                   "Micro-batches per optimizer step on each GPU.")
      .def_ro("gpus", &RunPlan::gpus)
      .def_prop_ro("layout", [](const RunPlan& r) { return p(r).layout(); }, "Where the training state lives.")
      .def_prop_ro("stacked_projections", [](const RunPlan& r) { return r.chosen.step->fused_projections; },
                   "q|k|v and gate|up each one matmul over stacked weights.")
      .def_prop_ro("recompute", [](const RunPlan& r) {
            const std::string remade = train::recompute_summary(*r.chosen.step);
            return remade.empty() ? std::string("none") : remade;
          }, "What the backward pass remakes: none, a policy's name, or the kinds of values the planner chose.")
      .def_prop_ro("sharded", [](const RunPlan& r) { return r.chosen.state.state_shards > 1; },
                   "AdamW's state and the masters' rest split over the GPUs.")
      // memory
      .def_prop_ro("device_budget", [](const RunPlan& r) { return r.request.device_budget; })
      .def_prop_ro("device_resident_bytes", [](const RunPlan& r) { return p(r).resident_bytes; },
                   "State kept on the device for the whole step.")
      .def_prop_ro("device_peak_bytes", [](const RunPlan& r) { return p(r).placement.device_peak; },
                   "The step's values at their peak, beside the resident state.")
      .def_ro("device_workspace_bytes", &RunPlan::reserved, "Kernel workspaces outside the graph.")
      .def_ro("minimum_device_budget", &RunPlan::minimum_device_budget,
              "The least device memory the step graph runs in beside the resident state.")
      .def_prop_ro("host_budget", [](const RunPlan& r) { return r.request.host_budget; })
      .def_prop_ro("host_state_bytes", [](const RunPlan& r) { return p(r).host_state_bytes; })
      .def_prop_ro("host_peak_bytes", [](const RunPlan& r) { return p(r).placement.host_peak; },
                   "Values offloaded to pinned host memory at their peak.")
      // traffic
      .def_prop_ro("host_to_device_bytes", [](const RunPlan& r) { return p(r).placement.bytes_loaded; },
                   "Moved per micro-batch.")
      .def_prop_ro("device_to_host_bytes", [](const RunPlan& r) { return p(r).placement.bytes_stored; },
                   "Moved per micro-batch.")
      .def_prop_ro("bytes_communicated", [](const RunPlan& r) { return p(r).bytes_communicated; },
                   "What each GPU sends the others per optimizer step.")
      .def_prop_ro("communication_seconds", [](const RunPlan& r) { return p(r).communication_seconds; })
      // the predicted step
      .def_prop_ro("gpu", [](const RunPlan& r) { return r.request.rates.name; }, "The GPU predicted for.")
      .def_prop_ro("step_seconds", [](const RunPlan& r) { return p(r).step_seconds; })
      .def_prop_ro("micro_batch_seconds", [](const RunPlan& r) { return p(r).micro.step_seconds; })
      .def_prop_ro("compute_seconds", [](const RunPlan& r) { return p(r).micro.compute_seconds; },
                   "Of one micro-batch.")
      .def_prop_ro("copy_wait_seconds", [](const RunPlan& r) { return p(r).micro.wait_seconds; },
                   "Of one micro-batch: compute waiting for copies.")
      .def_prop_ro("optimizer_seconds", [](const RunPlan& r) { return p(r).optimizer_seconds; })
      .def_prop_ro("tokens_per_second", [](const RunPlan& r) { return p(r).tokens_per_second * r.gpus; },
                   "Over all GPUs.")
      .def_prop_ro("mfu", [](const RunPlan& r) { return p(r).mfu; })
      .def_prop_ro("timeline_svg", &RunPlan::timeline_svg, "The predicted timeline of one micro-batch, as SVG text.")
      .def("__repr__", [](const RunPlan& r) {
        return "Plan(" + r.name + ", layout='" + p(r).layout() + "', step_seconds=" +
               std::to_string(p(r).step_seconds) + ", mfu=" + std::to_string(p(r).mfu) + ")";
      });
  m.def("plan", &plan, nb::arg("config"), nb::kw_only(), nb::arg("gpus") = 1, nb::arg("gpu") = "H100",
        nb::arg("auto_batch") = false, nb::arg("largest") = false,
        "Plans `config`'s training step as `spillway plan` does: on `gpus` GPUs of one host (data parallel), "
        "for an H100 or H200; auto_batch splits the step's sequences into the micro-batch size with the fastest "
        "predicted step; largest plans the most layers of the model's width that fit. Raises spillway.Error "
        "naming the budget when the step does not fit.");
}

}  // namespace spillway::python
