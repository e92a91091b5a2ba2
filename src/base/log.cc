#include "base/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace spillway {

LogLevel log_level() {
  static const LogLevel level = [] {
    const char* env = std::getenv("SPILLWAY_LOG");
    std::string v = env ? env : "info";
    if (v == "debug") return LogLevel::debug;
    if (v == "warn") return LogLevel::warn;
    if (v == "error") return LogLevel::error;
    return LogLevel::info;
  }();
  return level;
}

void log(LogLevel level, std::string_view message) {
  if (level < log_level()) return;
  static std::mutex mu;
  static constexpr const char* kTags[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[spillway %s] %.*s\n", kTags[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace spillway
