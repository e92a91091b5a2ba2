#include "model/llama_weights.h"

#include <random>

#include "base/status.h"
#include "graph/builder.h"
#include "model/llama_graph.h"

namespace spillway::model {

std::vector<ParameterSpec> parameter_specs(const LlamaConfig& config) {
  graph::Graph g;
  graph::Builder b(g, DType::f32);
  LlamaGraph m = build_llama(b, config, 1, 1);
  std::vector<ParameterSpec> specs;
  for (graph::Value p : m.parameters) specs.push_back({g.value(p).name, g.value(p).shape});
  return specs;
}

LlamaWeights LlamaWeights::zeros(const LlamaConfig& config) {
  LlamaWeights w;
  w.config_ = config;
  const std::vector<ParameterSpec> specs = parameter_specs(config);
  w.tensors_.resize(specs.size());
  // Tensors are filled by many threads at once: for an 8B model this is
  // 32 GB of fresh pages, which one thread takes seconds to fault in.
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < specs.size(); ++i) {
    w.tensors_[i] = {specs[i].name, specs[i].shape, std::vector<float>(static_cast<size_t>(specs[i].shape.numel()), 0.0f)};
  }
  return w;
}

LlamaWeights LlamaWeights::random(const LlamaConfig& config, uint64_t seed, double std) {
  LlamaWeights w = zeros(config);
  // Each tensor draws from its own stream, so threads may take them in any order.
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < w.tensors_.size(); ++i) {
    NamedTensor& t = w.tensors_[i];
    if (t.shape.rank() == 1) {
      std::fill(t.data.begin(), t.data.end(), 1.0f);  // RMSNorm weights start as the identity
    } else {
      std::mt19937_64 rng(seed * 1000003ull + i);
      std::normal_distribution<double> normal(0.0, std);
      for (float& x : t.data) x = static_cast<float>(normal(rng));
    }
  }
  return w;
}

NamedTensor& LlamaWeights::at(std::string_view name) {
  return const_cast<NamedTensor&>(static_cast<const LlamaWeights&>(*this).at(name));
}

const NamedTensor& LlamaWeights::at(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return t;
  }
  throw Error(std::string(name), "no such tensor in the model");
}

int64_t LlamaWeights::numel() const {
  int64_t n = 0;
  for (const auto& t : tensors_) n += t.shape.numel();
  return n;
}

}  // namespace spillway::model
