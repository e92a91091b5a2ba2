// Autoregressive generation: feed the prompt once, then one token at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "infer/llama_decoder.h"
#include "infer/sampler.h"

namespace spillway::infer {

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  SamplingOptions sampling;
  int32_t stop_token = -1;  // e.g. end of text; -1: none
};

// Calls `on_token` with each new token as soon as it is chosen (the stop
// token is not passed on). Returns the new tokens. Generation also stops
// when the decoder's context is full.
std::vector<int32_t> generate(LlamaDecoder& decoder, std::span<const int32_t> prompt,
                              const GenerateOptions& options,
                              const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace spillway::infer
