// What a person watching a run sees: on a terminal one line redrawn in place
// (step, loss, tok/s, ETA); otherwise plain lines at a steady interval, so a
// log file stays readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace spillway::train {

std::string format_duration(double seconds);  // "1h02m", "3m05s", "42s"

class Progress {
 public:
  // `out` nullptr: silent (the timing still counts).
  Progress(int64_t total_steps, std::FILE* out = stdout);

  // Reports a finished step; tokens counts that step's tokens.
  void step(int64_t step, double loss, double lr, int64_t tokens);
  // A line that must stand on its own (evaluation results, checkpoints).
  void note(const std::string& line);
  void finish();

  double tokens_per_second() const;

 private:
  void clear_line();

  int64_t total_;
  std::FILE* out_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_print_;
  int64_t first_step_ = -1;
  int64_t tokens_ = 0;
  // Tokens and time after the first step, which pays one-time costs.
  int64_t timed_tokens_ = 0;
  std::chrono::steady_clock::time_point timed_start_;
  bool line_open_ = false;
};

}  // namespace spillway::train
