// spillway: train, fine-tune and run LLaMA-family models.
#include <cstdio>
#include <map>

#include "base/status.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"spillway: train, fine-tune and run LLaMA-family models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", spillway::cli::version_text());
  std::map<CLI::App*, spillway::cli::Runner> runners;
  auto add = [&](spillway::cli::Runner (*adder)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    spillway::cli::Runner r = adder(app);
    runners[app.get_subcommands({})[before]] = std::move(r);
  };
  add(spillway::cli::add_train);
  add(spillway::cli::add_finetune);
  add(spillway::cli::add_generate);
  add(spillway::cli::add_eval);
  add(spillway::cli::add_tokenize);
  add(spillway::cli::add_bench);
  add(spillway::cli::add_plan);
  add(spillway::cli::add_convert);
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
  } catch (const spillway::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "spillway: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "spillway: %s\n", e.what());
    return 1;
  }
  return 0;
}
