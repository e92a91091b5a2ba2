// One OpenAI request run on the batch engine: its prompts made into ids (the
// chat template for messages), checked against the model's context and the
// cache, submitted as prompts x n engine requests, and their text streamed
// back choice by choice with stop strings and finish reasons.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "infer/batch_engine.h"
#include "infer/openai_request.h"
#include "infer/text_stream.h"
#include "model/tokenizer.h"

namespace spillway::infer {

// What the server knows of its model when it checks a request.
struct ServedModel {
  const Tokenizer* tokenizer = nullptr;
  int64_t context = 0;  // the model's max_position_embeddings
};

struct PreparedRequest {
  ApiRequest api;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> stop_tokens;
  int64_t max_tokens = 0;
  int64_t prompt_tokens = 0;  // over all prompts, each counted once
};

// Throws ApiError: 400 for a prompt that is empty or past the context, a
// max_tokens that with the prompt passes the context (code
// context_length_exceeded) or the cache, token ids outside the vocabulary, or
// messages the chat template cannot take.
PreparedRequest prepare_request(ApiRequest api, const ServedModel& model, const BatchEngine& engine);

class RunningChoices {
 public:
  // Submits every choice: choice i is prompt i / n, sample i % n, seeded
  // with seed + i (or a random seed when the request gave none).
  RunningChoices(BatchEngine& engine, const Tokenizer& tokenizer, const PreparedRequest& request);
  ~RunningChoices();  // cancels what still runs

  struct Event {
    size_t index = 0;
    std::string text;                          // new text, possibly empty
    std::optional<std::string> finish_reason;  // "stop" or "length" when it ended
  };
  // Waits up to `timeout` for progress and returns it. Throws ApiError(500)
  // when the engine failed a choice.
  std::vector<Event> poll(std::chrono::milliseconds timeout);
  bool done() const;
  void cancel();
  size_t size() const { return choices_.size(); }
  int64_t completion_tokens() const;
  // Seconds from submission to the first token of any choice; -1 before it.
  double first_token_seconds() const { return first_token_seconds_; }

 private:
  struct Choice {
    std::shared_ptr<RequestStream> stream;
    std::unique_ptr<TextStream> text;
    bool finished = false;
  };
  std::vector<Choice> choices_;
  std::chrono::steady_clock::time_point start_;
  double first_token_seconds_ = -1;
};

}  // namespace spillway::infer
