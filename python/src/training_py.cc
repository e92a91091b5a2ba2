// spillway.train(): the trainer the command line runs (train/trainer.h),
// in this process: each step's log record reaches a Python callback, which
// can stop the run; SIGINT (Ctrl-C) stops it at the next step boundary with
// its checkpoint, as it stops `spillway train`; the GIL is free while steps
// run.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <csignal>
#include <exception>
#include <string>

#include "base/status.h"
#include "infer/generate.h"
#include "python/src/bindings.h"
#include "python/src/json_py.h"
#include "train/trainer.h"

namespace nb = nanobind;

namespace spillway::python {

namespace {

train::TrainResult train(const RunConfigObject& run, nb::object on_step) {
  using train::Command;
  SPW_CHECK(run.command == Command::train || run.command == Command::finetune, "RunConfig",
            "has the settings of ", train::command_name(run.command),
            "; spillway.train() takes a RunConfig(command='train') or (command='finetune')");
  SPW_CHECK(run.config.parallel.nproc_per_node == 1, "parallel.nproc_per_node",
            "spillway.train() trains in this process, one rank; start ranks with `spillway train "
            "--nproc-per-node N`, torchrun or mpirun");
  // What the callback raised: the run stops at that step (with a
  // checkpoint, as on a signal) and the exception goes on to the caller.
  std::exception_ptr raised;
  train::StepHook hook;
  if (!on_step.is_none()) {
    hook = [&](const nlohmann::json& record) {
      nb::gil_scoped_acquire gil;
      try {
        nb::object answer = on_step(to_python(record));
        return !(answer.is(nb::bool_(false)));
      } catch (...) {
        raised = std::current_exception();
        return false;
      }
    };
  }
  train::TrainResult result;
  {
    nb::gil_scoped_release no_gil;
    result = train::train_model(run.config, infer::run_sample_text, {}, hook);
  }
  if (raised) std::rethrow_exception(raised);
  if (result.stop_signal != 0) {
    // As the command line ends: KeyboardInterrupt for Ctrl-C, SystemExit(143) for SIGTERM.
    const std::string line = std::string("stopped by ") + (result.stop_signal == SIGINT ? "SIGINT" : "SIGTERM") +
                             " after step " + std::to_string(result.steps_done) + ": checkpoint " +
                             result.checkpoint + "; continue with run={'resume': True}";
    if (result.stop_signal == SIGINT) {
      PyErr_SetString(PyExc_KeyboardInterrupt, line.c_str());
    } else {
      PyErr_SetObject(PyExc_SystemExit, nb::int_(128 + result.stop_signal).ptr());
    }
    throw nb::python_error();
  }
  return result;
}

}  // namespace

void bind_training(nb::module_& m) {
  nb::class_<train::TrainResult>(m, "TrainResult", "What a training run ended with.")
      .def_ro("steps_done", &train::TrainResult::steps_done, "Optimizer steps done, resumed ones included.")
      .def_ro("train_loss", &train::TrainResult::train_loss, "Mean loss of the last step's micro-batches.")
      .def_prop_ro("validation_loss", [](const train::TrainResult& r) -> nb::object {
            if (!r.validation || std::isnan(r.validation_loss)) return nb::none();
            return nb::float_(r.validation_loss);
          }, "Validation loss at the end; None when validation was off or no step ran.")
      .def_ro("unigram_entropy", &train::TrainResult::unigram_entropy,
              "Entropy of the training data's token frequencies, in nats: the loss of a model that learned "
              "nothing but them.")
      .def_ro("tokens_per_second", &train::TrainResult::tokens_per_second)
      .def_ro("peak_device_bytes", &train::TrainResult::peak_device_bytes)
      .def_ro("checkpoint", &train::TrainResult::checkpoint, "Folder of the last checkpoint.")
      .def_ro("sample", &train::TrainResult::sample, "Text generated at the end of the schedule.")
      .def_ro("stopped", &train::TrainResult::stopped_by_caller,
              "True when on_step stopped the run before the end of its schedule.")
      .def("__repr__", [](const train::TrainResult& r) {
        return "TrainResult(steps_done=" + std::to_string(r.steps_done) + ", train_loss=" +
               std::to_string(r.train_loss) + ", checkpoint='" + r.checkpoint + "')";
      });
  m.def("train", &train, nb::arg("config"), nb::arg("on_step") = nb::none(),
        "Trains as `config` says (a RunConfig of train or finetune), in this process, and returns a "
        "TrainResult. on_step(record) hears each step's record as train_log.jsonl has it (step, loss, lr, "
        "grad_norm, tokens, epoch, tok_per_s, elapsed_s); returning False stops the run there with a "
        "checkpoint, and an exception it raises stops it likewise and is raised on. Ctrl-C stops the run at "
        "the next step boundary with a checkpoint and raises KeyboardInterrupt. The GIL is released while "
        "steps run.");
}

}  // namespace spillway::python
