// The server's counters, and /metrics in Prometheus' text format: responses
// by endpoint and status, tokens in and out, the batch's and the cache's
// occupancy (from the engine), time to first token, dropped clients, and
// where the model runs.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "infer/batch_engine.h"

namespace spillway::infer {

class ServerMetrics {
 public:
  void count_response(const std::string& path, int status);
  // A request answered in full; first_token_seconds < 0 when none came.
  void record_request(int64_t prompt_tokens, int64_t completion_tokens, double first_token_seconds);
  void count_disconnect();
  // `decoder`: where the model runs (BatchDecoder::description()), as the
  // label of an info gauge.
  std::string prometheus_text(const EngineStats& engine, const std::string& decoder) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> responses_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0, requests_ = 0, disconnects_ = 0;
  double first_token_sum_ = 0;
  int64_t first_token_count_ = 0;
};

}  // namespace spillway::infer
