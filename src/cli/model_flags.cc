#include "cli/model_flags.h"

#include <omp.h>

namespace spillway::cli {

void ModelRunFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--device", device, "auto (the GPU when there is one), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("-t,--threads", threads, "CPU threads (0: every core)")->capture_default_str();
}

void ModelRunFlags::apply() const {
  if (threads > 0) omp_set_num_threads(threads);
}

}  // namespace spillway::cli
