#include "cli/error_line.h"

#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>

#include "base/error_text.h"
#include "base/status.h"

namespace spillway::cli {

std::string command_line_error_text(const CLI::Error& e) {
  std::string text = one_line(e.what());
  // CLI11's "Could not convert: --batch = two" puts the flag in the middle.
  constexpr std::string_view kConvert = "Could not convert: ";
  if (text.starts_with(kConvert)) {
    const std::string rest = text.substr(kConvert.size());
    if (size_t eq = rest.find(" = "); eq != std::string::npos) {
      return rest.substr(0, eq) + ": '" + rest.substr(eq + 3) + "' is not a value it takes";
    }
  }
  // "The following argument(s) was/were not expected: --bogus x" (the class,
  // not get_name(): a subcommand's carries the subcommand's name)
  constexpr std::string_view kExtras = "not expected: ";
  if (size_t at = text.find(kExtras); dynamic_cast<const CLI::ExtrasError*>(&e) && at != std::string::npos) {
    return text.substr(at + kExtras.size()) + ": not an option or argument that this command takes (--help lists them)";
  }
  // "--steps: 1 required INT missing": the flag was given without its value.
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && text.ends_with(" missing")) {
    if (size_t colon = text.find(": "); colon != std::string::npos) {
      const std::string count = text.substr(colon + 2, text.find(' ', colon + 2) - colon - 2);
      return text.substr(0, colon) + (count == "1" ? ": needs a value" : ": needs " + count + " values");
    }
  }
  return text;
}

std::string command_missing_text(const CLI::App& app, int argc, char** argv) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] != '-') return std::string(argv[i]) + ": not a command; the commands are " + names;
  }
  return "no command given; the commands are " + names + " (--help says more)";
}

void print_error_line(const std::string& text) {
  std::fflush(stdout);
  std::fprintf(stderr, "spillway: %s\n", text.c_str());
  std::fflush(stderr);
}

namespace {
const std::string* g_doing = nullptr;
}  // namespace

void install_last_resort_handler(const std::string* doing) {
  g_doing = doing;
  std::set_terminate([] {
    const std::exception_ptr e = std::current_exception();
    const std::string doing = g_doing ? *g_doing : std::string("spillway");
    print_error_line(e ? escaped_error_text(e, doing) : doing + ": stopped by an internal error (std::terminate)");
    // No destructors or atexit handlers: other threads may still be running
    // and the state they share is not known to be sound.
    std::_Exit(1);
  });
}

}  // namespace spillway::cli
