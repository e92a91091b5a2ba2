// The parameters of a LLaMA model as named float32 tensors, in the order
// build_llama declares them (so index i binds graph parameter i).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/shape.h"
#include "model/llama_config.h"

namespace spillway::model {

struct NamedTensor {
  std::string name;
  Shape shape;
  std::vector<float> data;
};

struct ParameterSpec {
  std::string name;
  Shape shape;
};

// Names and shapes of a config's parameters, read off the graph builder so
// that there is one description of the model, not two.
std::vector<ParameterSpec> parameter_specs(const LlamaConfig& config);

// Parameter `index` (parameter_specs's order) of LlamaWeights::random,
// alone: each tensor draws from its own stream of the seed, so one made
// here equals the whole model's, and a holder that let go of it can make it
// again.
void random_parameter(const Shape& shape, size_t index, uint64_t seed, double std, std::span<float> out);

class LlamaWeights {
 public:
  LlamaWeights() = default;
  // Hugging Face's initialization: matrices ~ N(0, std), norm weights 1,
  // each tensor from its own stream of the seed.
  static LlamaWeights random(const LlamaConfig& config, uint64_t seed, double std = 0.02);
  // Zeros of the same layout (gradient accumulators, optimizer moments).
  static LlamaWeights zeros(const LlamaConfig& config);
  // Names and shapes alone, no values (as release_values leaves them): for
  // a holder that fills its tensors one at a time.
  static LlamaWeights without_values(const LlamaConfig& config);
  // The same tensors, those not kept empty (no values, shape {0}): a
  // pipeline stage's share of the model, indexed as the whole is.
  LlamaWeights only(const std::vector<bool>& keep) const;
  // The same, the kept values moved out and the rest let go of: this holder
  // is left with names and shapes alone.
  LlamaWeights take_only(const std::vector<bool>& keep);
  // Gives the values' memory back, keeping names and shapes, for a holder
  // whose values now live elsewhere (an engine's state).
  void release_values();

  const LlamaConfig& config() const { return config_; }
  std::vector<NamedTensor>& tensors() { return tensors_; }
  const std::vector<NamedTensor>& tensors() const { return tensors_; }
  // Throws Error naming the tensor when it is not part of the model.
  NamedTensor& at(std::string_view name);
  const NamedTensor& at(std::string_view name) const;
  int64_t numel() const;

 private:
  LlamaConfig config_;
  std::vector<NamedTensor> tensors_;
};

}  // namespace spillway::model
