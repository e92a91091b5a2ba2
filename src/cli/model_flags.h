// The flags of the commands that run a model outside a run configuration
// (generate, eval): where it runs and on how many CPU threads.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace spillway::cli {

struct ModelRunFlags {
  std::string device = "auto";
  int threads = 0;

  void add_to(CLI::App* cmd);
  // Sets the OpenMP threads when --threads asked for a number.
  void apply() const;
};

}  // namespace spillway::cli
