#include "train/progress.h"

#include <unistd.h>

#include <cmath>

namespace spillway::train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60));
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  return buf;
}

Progress::Progress(int64_t total_steps, std::FILE* out)
    : total_(total_steps), out_(out), tty_(out != nullptr && isatty(fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()), last_print_(start_), timed_start_(start_) {}

double Progress::tokens_per_second() const {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - timed_start_).count();
  return timed_tokens_ > 0 && secs > 0 ? static_cast<double>(timed_tokens_) / secs : 0.0;
}

void Progress::clear_line() {
  if (line_open_) {
    std::fputs("\r\033[K", out_);
    line_open_ = false;
  }
}

void Progress::step(int64_t step, double loss, double lr, int64_t tokens) {
  auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) {
    first_step_ = step;
    timed_start_ = now;
  } else {
    timed_tokens_ += tokens;
  }
  tokens_ += tokens;
  const int64_t done = step + 1;
  double rate = tokens_per_second();
  double steps_per_s = rate > 0 ? rate / static_cast<double>(tokens) : 0;
  double eta = steps_per_s > 0 ? static_cast<double>(total_ - done) / steps_per_s : NAN;
  char line[200];
  std::snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | ETA %s",
                static_cast<long long>(done), static_cast<long long>(total_), loss, lr, rate,
                format_duration(eta).c_str());
  if (!out_) return;
  if (tty_) {
    std::fprintf(out_, "\r\033[K%s", line);
    line_open_ = true;
    std::fflush(out_);
  } else if (done == total_ || step == first_step_ ||
             std::chrono::duration<double>(now - last_print_).count() >= 10.0) {
    std::fprintf(out_, "%s\n", line);
    std::fflush(out_);
    last_print_ = now;
  }
}

void Progress::note(const std::string& line) {
  if (!out_) return;
  clear_line();
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void Progress::finish() {
  if (!out_) return;
  if (line_open_) {
    std::fputc('\n', out_);
    line_open_ = false;
  }
  std::fflush(out_);
}

}  // namespace spillway::train
