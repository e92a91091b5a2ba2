// spillway: train, fine-tune and run LLaMA-family models.
#include <map>
#include <string>
#include <string_view>

#include "cli/commands.h"
#include "cli/error_line.h"

namespace {

// What main is doing, for the error line of an exception that says nothing
// of where it came from (std::bad_alloc): "reading the command line", then
// the subcommand's name.
std::string g_doing = "reading the command line";

int run(int argc, char** argv) {
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
  add(spillway::cli::add_serve);
  add(spillway::cli::add_chat);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive as "errors" with exit code 0; CLI11 prints
    // those. A real one is our one line (CLI11's adds a second, "Run with
    // --help for more information.") and exit 1, as every other error.
    if (e.get_exit_code() == 0) return app.exit(e);
    const bool no_command = std::string_view(e.what()) == "A subcommand is required";
    spillway::cli::print_error_line(no_command ? spillway::cli::command_missing_text(app, argc, argv)
                                               : spillway::cli::command_line_error_text(e));
    return 1;
  }
  for (auto& [sub, runner] : runners) {
    if (sub->parsed()) {
      g_doing = sub->get_name();
      return runner();
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  spillway::cli::install_last_resort_handler(&g_doing);
  try {
    return run(argc, argv);
  } catch (...) {
    spillway::cli::print_error_line(spillway::escaped_error_text(std::current_exception(), g_doing));
    return 1;
  }
}
