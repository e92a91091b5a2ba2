#include "cli/error_line.h"

#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>

#include "base/status.h"

namespace spillway::cli {

namespace {

// `text` on one line: line breaks become "; ", trailing ones go.
std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "; ";
    } else if (c != '\r') {
      out += c;
    }
  }
  return out;
}

// nlohmann's "[json.exception.type_error.302] type must be ..." without the
// bracket, which names the library and not the problem.
std::string without_library_prefix(std::string text) {
  if (text.starts_with("[json.exception.")) {
    if (size_t close = text.find("] "); close != std::string::npos) text.erase(0, close + 2);
  }
  return text;
}

}  // namespace

std::string escaped_error_text(std::exception_ptr e, std::string_view doing) {
  const std::string at = std::string(doing) + ": ";
  try {
    std::rethrow_exception(e);
  } catch (const Error& error) {
    return one_line(error.what());  // names its own file, flag or variable
  } catch (const std::bad_alloc&) {
    return at + "out of memory: this machine could not allocate what it needs (are the sizes in the model's "
                "config, the data and the flags what you meant?)";
  } catch (const std::length_error&) {
    // std::vector's "cannot create std::vector larger than max_size()": a
    // size that no allocation could hold, typically from a huge count.
    return at + "out of memory: asked for more elements than any allocation can hold (a huge size in the config, "
                "data or flags?)";
  } catch (const std::exception& error) {
    return at + one_line(without_library_prefix(error.what()));
  } catch (...) {
    return at + "failed with an error of unknown kind";
  }
}

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
