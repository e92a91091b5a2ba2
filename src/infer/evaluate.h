// A model's loss on text: the mean negative log-likelihood of each token
// given the ones before it, as transformers' `labels=input_ids` loss computes
// it, and its exponential, the perplexity. What `spillway eval` reports.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "infer/decoder.h"
#include "model/llama_config.h"

namespace spillway::infer {

struct LossSum {
  double loss = 0;     // summed over targets, in nats
  int64_t tokens = 0;  // targets counted
  double mean() const { return tokens > 0 ? loss / static_cast<double>(tokens) : NAN; }
  double perplexity() const { return std::exp(mean()); }
};

// Adds the loss of every token of `ids` but the first. The ids are fed in
// windows of `window` + 1 tokens that overlap by one, from a reset decoder
// each, so every token is predicted once from the tokens of its window before
// it (all of them when the ids fit one window). The decoder must hold
// `window` + 1 tokens. Log-softmax in double precision.
void add_loss(Decoder& decoder, std::span<const int32_t> ids, int64_t window, LossSum& sum);

// The window `seq` asks for, or with 0 the model's context up to 2048
// tokens; Error naming --seq when it is longer than the context.
int64_t eval_window(const model::LlamaConfig& config, int64_t seq);

}  // namespace spillway::infer
