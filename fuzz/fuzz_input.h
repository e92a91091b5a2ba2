// What every harness shares: the input written where a parser that takes a
// path can read it, and the rule they all check, that a bad input ends in
// spillway::Error (one line for the user) and in nothing else: another
// exception escapes to libFuzzer and counts as a crash, as do the
// sanitizers' reports, a leak, and a run past libFuzzer's timeout.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "base/status.h"

namespace spillway::fuzz {

// A folder of this process's own, in memory where /dev/shm exists (one file
// written per execution), removed when the process ends.
inline const std::string& scratch_dir() {
  struct ScratchDir {
    std::string path;
    ScratchDir() {
      const std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
      path = base + "/spillway_fuzz_XXXXXX";
      if (::mkdtemp(path.data()) == nullptr) {
        std::perror("mkdtemp");
        std::abort();
      }
    }
    ~ScratchDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const ScratchDir dir;
  return dir.path;
}

inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `parse`; an Error is the expected end of a bad input.
template <typename F>
void expect_only_errors(F&& parse) {
  try {
    parse();
  } catch (const Error&) {
  }
}

}  // namespace spillway::fuzz
