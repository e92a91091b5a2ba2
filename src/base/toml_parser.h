// toml++ included the one way this project uses it: header-only (a machine
// with only its headers links nothing more), and with every check toml++
// 3.3 makes of what it assumes about its input throwing TomlCheckFailed.
// Left as they are, a release build turns a failed one into undefined
// behaviour and a debug build aborts; base/toml_guard refuses the inputs
// known to reach them with a better message, and this catches the rest.
// Include toml++ through this header only: every translation unit must see
// the same definition of its inline functions.
#pragma once

#include <cassert>
#include <stdexcept>
#include <string>

namespace spillway {

struct TomlCheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void toml_check_failed(const char* check) {
  throw TomlCheckFailed(std::string("the TOML parser stopped on its own check (") + check + ")");
}

}  // namespace spillway

// toml++ drops its checks, or makes them assumptions, where NDEBUG is set.
#pragma push_macro("NDEBUG")
#undef NDEBUG
#define TOML_HEADER_ONLY 1
#define TOML_ASSERT(expr) ((expr) ? static_cast<void>(0) : ::spillway::toml_check_failed(#expr))
#include <toml++/toml.h>
#pragma pop_macro("NDEBUG")
