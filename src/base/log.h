// Plain logging to stderr. Progress output for people lives in the CLI; this
// is for messages a library layer must surface (warnings, chosen paths).
#pragma once

#include <string>
#include <string_view>

namespace spillway {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };

// The level comes from SPILLWAY_LOG (debug, info, warn, error; default info).
LogLevel log_level();
void log(LogLevel level, std::string_view message);
// One rank among several: its messages below `quieter_than` are dropped (the
// lead rank speaks for all), and the rest start with `prefix` ("rank 3: ").
void set_log_rank(LogLevel quieter_than, std::string prefix);
inline void log_info(std::string_view m) { log(LogLevel::info, m); }
inline void log_warn(std::string_view m) { log(LogLevel::warn, m); }

}  // namespace spillway
