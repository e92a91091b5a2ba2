// Continuous batching over a BatchDecoder: requests wait in a queue, join the
// running batch at any step once the cache can hold them whole (prompt plus
// every token they may generate, so that none is ever cut off for want of
// memory), and leave it the step they finish, are cancelled or fail. Each
// step runs one token for every generating request and, within a token
// budget, pieces of waiting prompts (chunked prefill), so that a long prompt
// does not stall the streams already running.
//
// One thread owns the decoder and runs the steps; callers submit requests and
// read their tokens from a RequestStream, from any thread. Each request
// samples with its own sampler (its own seed), so its tokens do not depend on
// the batch around it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infer/batch_decoder.h"
#include "infer/sampler.h"

namespace spillway::infer {

struct EngineRequest {
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 16;
  SamplingOptions sampling;
  std::vector<int32_t> stop_tokens;  // end generation; not passed on
  int64_t vocab_limit = 0;           // draw only among ids below this (0: all)
};

enum class FinishReason { running, stop, length, cancelled, error };

// The caller's end of one request.
class RequestStream {
 public:
  struct Update {
    std::vector<int32_t> tokens;  // new since the last read
    FinishReason finish = FinishReason::running;
    std::string error;  // with FinishReason::error
  };
  // Waits up to `timeout` for new tokens or the end; returns what came.
  Update read(std::chrono::milliseconds timeout);
  // Asks the engine to drop the request; it leaves the batch at the next step.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  friend class BatchEngine;
  void push(int32_t token);
  void finish(FinishReason reason, std::string error = {});

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int32_t> pending_;
  FinishReason finish_ = FinishReason::running;
  std::string error_;
  std::atomic<bool> cancelled_{false};
};

struct EngineOptions {
  int64_t max_sequences = 16;       // requests in the running batch at once
  int64_t prefill_tokens = 256;     // prompt tokens one step takes at most, over all requests
};

// Counters for /metrics; a copy taken under the engine's lock.
struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t blocks_used = 0, blocks_total = 0, block_tokens = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0, steps = 0;
  int64_t finished_stop = 0, finished_length = 0, cancelled = 0, failed = 0;
};

class BatchEngine {
 public:
  BatchEngine(std::unique_ptr<BatchDecoder> decoder, const EngineOptions& options);
  ~BatchEngine();  // stops the step thread; requests still open end as cancelled
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Queues a request. Throws Error naming the numbers when the whole cache
  // could not hold it (prompt plus max_new_tokens), or when it is malformed
  // (no prompt, max_new_tokens below 1).
  std::shared_ptr<RequestStream> submit(EngineRequest request);
  // Tokens (prompt plus output) the cache can hold for one request.
  int64_t max_request_tokens() const;
  EngineStats stats() const;
  const std::string& description() const { return description_; }

 private:
  struct Active {
    EngineRequest request;
    std::shared_ptr<RequestStream> stream;
    TokenSampler sampler;
    int64_t sequence = -1;
    int64_t fed = 0;         // prompt tokens fed so far
    int64_t generated = 0;
    int32_t next_input = -1;  // the last token drawn, fed at the next step
  };

  void loop();
  void admit();                 // under mutex_
  bool step();                  // one batch step; false when there was nothing to run
  // Closes a's sequence and counts it; its stream hears the finish at
  // publish_finishes, once the step's stats say it too.
  void retire(Active& a, FinishReason reason, const std::string& error = {});
  void publish_finishes();

  std::unique_ptr<BatchDecoder> decoder_;
  const EngineOptions options_;
  const std::string description_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::unique_ptr<Active>> waiting_;   // guarded by mutex_
  std::vector<std::unique_ptr<Active>> running_;  // the step thread's; its size mirrored in stats_
  EngineStats stats_;                             // guarded by mutex_
  struct Finished {
    std::shared_ptr<RequestStream> stream;
    FinishReason reason;
    std::string error;
  };
  std::vector<Finished> finished_;  // the step thread's: retired, not yet told
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace spillway::infer
