#include "base/log.h"

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <mutex>
#include <string>

namespace spillway {

namespace {

std::mutex& log_mutex() {
  static std::mutex mu;
  return mu;
}
LogLevel rank_floor = LogLevel::debug;
std::string rank_prefix;

}  // namespace

LogLevel log_level() {
  static const LogLevel from_env = [] {
    const char* env = std::getenv("SPILLWAY_LOG");
    std::string v = env ? env : "info";
    if (v == "debug") return LogLevel::debug;
    if (v == "warn") return LogLevel::warn;
    if (v == "error") return LogLevel::error;
    return LogLevel::info;
  }();
  std::lock_guard<std::mutex> lock(log_mutex());
  return std::max(from_env, rank_floor);
}

void set_log_rank(LogLevel quieter_than, std::string prefix) {
  std::lock_guard<std::mutex> lock(log_mutex());
  rank_floor = quieter_than;
  rank_prefix = std::move(prefix);
}

void log(LogLevel level, std::string_view message) {
  if (level < log_level()) return;
  static constexpr const char* kTags[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(log_mutex());
  std::fprintf(stderr, "[spillway %s] %s%.*s\n", kTags[static_cast<int>(level)], rank_prefix.c_str(),
               static_cast<int>(message.size()), message.data());
}

}  // namespace spillway
