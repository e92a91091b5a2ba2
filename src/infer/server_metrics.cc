#include "infer/server_metrics.h"

#include <sstream>

namespace spillway::infer {

void ServerMetrics::count_response(const std::string& path, int status) {
  // Paths outside the API are one label, so that probes of random URLs
  // cannot grow the series without bound.
  const bool known = path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/models" ||
                     path == "/health" || path == "/metrics";
  std::lock_guard lock(mutex_);
  ++responses_[{known ? path : "other", status}];
}

void ServerMetrics::record_request(int64_t prompt_tokens, int64_t completion_tokens, double first_token_seconds) {
  std::lock_guard lock(mutex_);
  ++requests_;
  prompt_tokens_ += prompt_tokens;
  completion_tokens_ += completion_tokens;
  if (first_token_seconds >= 0) {
    first_token_sum_ += first_token_seconds;
    ++first_token_count_;
  }
}

void ServerMetrics::count_disconnect() {
  std::lock_guard lock(mutex_);
  ++disconnects_;
}

std::string ServerMetrics::prometheus_text(const EngineStats& e, const std::string& decoder) const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  // A metric of one value: its header and its line.
  auto single = [&](const char* name, const char* type, const char* help, auto value) {
    metric(name, type, help);
    out << name << ' ' << value << '\n';
  };
  // Prometheus label values escape backslashes, quotes and newlines.
  std::string label;
  for (char ch : decoder) {
    if (ch == '\\' || ch == '"') label += '\\';
    label += ch == '\n' ? std::string("\\n") : std::string(1, ch);
  }
  metric("spillway_decoder_info", "gauge", "Where the model runs (device, dtype, KV cache), as a label.");
  out << "spillway_decoder_info{decoder=\"" << label << "\"} 1\n";
  metric("spillway_http_responses_total", "counter", "HTTP responses by endpoint and status code.");
  for (const auto& [key, count] : responses_) {
    out << "spillway_http_responses_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} "
        << count << '\n';
  }
  single("spillway_requests_completed_total", "counter", "Generation requests answered in full.", requests_);
  single("spillway_client_disconnects_total", "counter",
         "Requests dropped because their client went away.", disconnects_);
  single("spillway_prompt_tokens_total", "counter", "Prompt tokens of answered requests.", prompt_tokens_);
  single("spillway_generation_tokens_total", "counter", "Tokens generated for answered requests.", completion_tokens_);
  metric("spillway_time_to_first_token_seconds", "summary", "From a request's arrival to its first token.");
  out << "spillway_time_to_first_token_seconds_sum " << first_token_sum_ << '\n'
      << "spillway_time_to_first_token_seconds_count " << first_token_count_ << '\n';
  single("spillway_requests_running", "gauge", "Sequences in the running batch.", e.running);
  single("spillway_requests_waiting", "gauge", "Sequences waiting for room in the batch or the cache.", e.waiting);
  single("spillway_kv_cache_blocks_used", "gauge", "KV cache blocks held by sequences.", e.blocks_used);
  single("spillway_kv_cache_blocks", "gauge", "KV cache blocks in all.", e.blocks_total);
  single("spillway_kv_cache_block_tokens", "gauge", "Tokens one KV cache block holds.", e.block_tokens);
  single("spillway_engine_prompt_tokens_total", "counter", "Prompt tokens the engine has processed.", e.prompt_tokens);
  single("spillway_engine_generated_tokens_total", "counter", "Tokens the engine has generated.", e.generated_tokens);
  single("spillway_engine_steps_total", "counter", "Batch steps run.", e.steps);
  metric("spillway_sequences_finished_total", "counter", "Sequences that left the batch, by reason.");
  out << "spillway_sequences_finished_total{reason=\"stop\"} " << e.finished_stop << '\n'
      << "spillway_sequences_finished_total{reason=\"length\"} " << e.finished_length << '\n'
      << "spillway_sequences_finished_total{reason=\"cancelled\"} " << e.cancelled << '\n'
      << "spillway_sequences_finished_total{reason=\"error\"} " << e.failed << '\n';
  return out.str();
}

}  // namespace spillway::infer
