// Helpers for end-to-end tests: a scratch folder, a small generated English
// corpus, a micro model config, and running the `spillway` command.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model/llama_weights_io.h"
#include "nlohmann/json.hpp"

namespace spillway::e2e {

namespace fs = std::filesystem;

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(fs::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return (path_ / rel).string(); }

 private:
  fs::path path_;
};

// Sentences from a small grammar: enough structure for a model to learn in
// a few dozen steps, documents separated by "%" lines like fortune files.
inline std::string make_corpus(int documents, uint64_t seed) {
  const std::vector<std::string> subjects = {"the cat", "a dog", "my friend", "the old man", "every child", "the river"};
  const std::vector<std::string> verbs = {"sees", "likes", "follows", "finds", "remembers", "carries"};
  const std::vector<std::string> objects = {"the moon", "a red ball", "the small house", "her song", "the long road"};
  std::mt19937_64 rng(seed);
  auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  std::ostringstream out;
  for (int d = 0; d < documents; ++d) {
    int sentences = 1 + static_cast<int>(rng() % 3);
    for (int s = 0; s < sentences; ++s) {
      std::string subject = pick(subjects);
      subject[0] = static_cast<char>(std::toupper(subject[0]));
      out << subject << " " << pick(verbs) << " " << pick(objects) << ". ";
    }
    out << "\n%\n";
  }
  return out.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::string micro_config_json() {
  return R"({"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true})";
}

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

// Runs a shell command line, its stdout and stderr together.
inline CommandResult run_command(const std::string& command_line) {
  CommandResult r;
  std::string cmd = command_line + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs `spillway ARGS` (ARGS already shell-quoted where needed).
inline CommandResult run_spillway(const std::string& args) { return run_command(std::string(SPILLWAY_BIN) + " " + args); }

// The losses of a run's steps, from its train_log.jsonl.
inline std::vector<double> step_losses(const std::string& run) {
  std::istringstream log(read_file(run + "/train_log.jsonl"));
  std::vector<double> losses;
  for (std::string line; std::getline(log, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

// The largest difference between two checkpoints' weights.
inline float max_weight_difference(const std::string& a_dir, const std::string& b_dir) {
  const model::LlamaWeights a = model::load_llama(a_dir), b = model::load_llama(b_dir);
  float worst = 0;
  for (size_t t = 0; t < a.tensors().size(); ++t) {
    const auto& x = a.tensors()[t].data;
    const auto& y = b.tensors()[t].data;
    EXPECT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  }
  return worst;
}

}  // namespace spillway::e2e
