// Spillway processes in the background for the tests of runs with several
// ranks: started with extra environment variables, waited for with a limit,
// their ranks found, signalled.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "e2e/e2e_util.h"

extern char** environ;

namespace spillway::e2e {

using namespace std::chrono_literals;

// A command line's words, as a process's arguments.
inline std::vector<std::string> words_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// A spillway process started in the background with extra environment
// variables, its output in `log`; `in_child` (limits, signal dispositions)
// runs in the child before the exec.
inline pid_t start_spillway(const std::vector<std::string>& args, const std::vector<std::string>& env,
                            const std::string& log, const std::function<void()>& in_child = {}) {
  // Else the child's freopen writes out the test's buffered output again.
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (in_child) in_child();
    for (const std::string& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    FILE* out = std::freopen(log.c_str(), "w", stdout);
    ::dup2(::fileno(out), 2);
    std::vector<char*> argv{const_cast<char*>(SPILLWAY_BIN)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execve(SPILLWAY_BIN, argv.data(), environ);
    ::_exit(127);
  }
  return pid;
}

// The exit code of `pid`, or -1 (after killing it) when it runs past `limit`.
inline int wait_for(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    std::this_thread::sleep_for(20ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

inline bool wait_until_exists(const std::string& path, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!fs::exists(path) || fs::file_size(path) == 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// The ranks --nproc-per-node started under `parent`, once they run.
inline std::vector<pid_t> ranks_of(pid_t parent) {
  std::istringstream children(read_file("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                                        "/children"));
  std::vector<pid_t> ranks;
  for (pid_t p; children >> p;) ranks.push_back(p);
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// A run of two ranks (`args`, its output to `log`) whose rank 1 hangs
// (SIGSTOP) once the run's log in `run` has a step's loss: its exit code and
// how long after the hang it ended (every rank then killed). Nothing where
// the run never got to a step (a test failure added).
struct HungRun {
  int exit_code;
  std::chrono::steady_clock::duration ended_after;
};
inline std::optional<HungRun> hang_a_rank_after_a_step(const std::vector<std::string>& args, const std::string& run,
                                                        const std::string& log) {
  const pid_t parent = start_spillway(args, {}, log);
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (read_file(run + "/train_log.jsonl").find("\"loss\"") == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(parent, SIGKILL);
      ADD_FAILURE() << "no step within 120 s: " << read_file(log);
      return std::nullopt;
    }
    std::this_thread::sleep_for(20ms);
  }
  const std::vector<pid_t> ranks = ranks_of(parent);
  if (ranks.size() != 2) {
    ADD_FAILURE() << ranks.size() << " ranks, not 2";
    return std::nullopt;
  }
  const auto stopped = std::chrono::steady_clock::now();
  ::kill(ranks[1], SIGSTOP);
  const int exit_code = wait_for(parent, 120s);
  const auto ended_after = std::chrono::steady_clock::now() - stopped;
  // Whatever happened, no rank outlives the test holding a GPU or a port.
  for (pid_t rank : ranks) ::kill(rank, SIGKILL);
  return HungRun{exit_code, ended_after};
}

}  // namespace spillway::e2e
