#include "model/llama_weights.h"

#include <algorithm>
#include <atomic>
#include <new>
#include <random>
#include <stdexcept>

#include "base/bytes.h"
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

LlamaWeights LlamaWeights::without_values(const LlamaConfig& config) {
  LlamaWeights w;
  w.config_ = config;
  for (const ParameterSpec& spec : parameter_specs(config)) w.tensors_.push_back({spec.name, spec.shape, {}});
  return w;
}

LlamaWeights LlamaWeights::zeros(const LlamaConfig& config) {
  LlamaWeights w;
  w.config_ = config;
  const std::vector<ParameterSpec> specs = parameter_specs(config);
  w.tensors_.resize(specs.size());
  // Tensors are filled by many threads at once: for an 8B model this is
  // 32 GB of fresh pages, which one thread takes seconds to fault in.
  // An exception may not leave an OpenMP region (it would end the process
  // in std::terminate), so a failed allocation is noted and reported after.
  std::atomic<bool> out_of_memory{false};
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < specs.size(); ++i) {
    try {
      w.tensors_[i] = {specs[i].name, specs[i].shape,
                       std::vector<float>(static_cast<size_t>(specs[i].shape.numel()), 0.0f)};
    } catch (const std::bad_alloc&) {
      out_of_memory = true;
    } catch (const std::length_error&) {
      out_of_memory = true;
    }
  }
  if (out_of_memory) {
    double bytes = 0;
    for (const ParameterSpec& spec : specs) bytes += static_cast<double>(spec.shape.numel()) * sizeof(float);
    bytes = std::min(bytes, 1e19);  // a wrapped size would not convert back
    throw Error("model weights",
                detail::concat("out of memory: this machine could not allocate ",
                               format_bytes(static_cast<uint64_t>(bytes)),
                               " for the f32 parameters of a model of ", config.num_hidden_layers,
                               " layers and hidden size ", config.hidden_size));
  }
  return w;
}

LlamaWeights LlamaWeights::only(const std::vector<bool>& keep) const {
  SPW_CHECK(keep.size() == tensors_.size(), "model weights", keep.size(), " choices for ", tensors_.size(),
            " tensors");
  LlamaWeights w;
  w.config_ = config_;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    w.tensors_.push_back(keep[i] ? tensors_[i] : NamedTensor{tensors_[i].name, Shape{0}, {}});
  }
  return w;
}

LlamaWeights LlamaWeights::take_only(const std::vector<bool>& keep) {
  SPW_CHECK(keep.size() == tensors_.size(), "model weights", keep.size(), " choices for ", tensors_.size(),
            " tensors");
  LlamaWeights w;
  w.config_ = config_;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    NamedTensor& t = tensors_[i];
    w.tensors_.push_back(keep[i] ? NamedTensor{t.name, t.shape, std::move(t.data)} : NamedTensor{t.name, Shape{0}, {}});
    std::vector<float>().swap(t.data);
  }
  return w;
}

void LlamaWeights::release_values() {
  for (NamedTensor& t : tensors_) std::vector<float>().swap(t.data);
}

void random_parameter(const Shape& shape, size_t index, uint64_t seed, double std, std::span<float> out) {
  if (shape.rank() == 1) {
    std::fill(out.begin(), out.end(), 1.0f);  // RMSNorm weights start as the identity
    return;
  }
  std::mt19937_64 rng(seed * 1000003ull + index);
  std::normal_distribution<double> normal(0.0, std);
  for (float& x : out) x = static_cast<float>(normal(rng));
}

LlamaWeights LlamaWeights::random(const LlamaConfig& config, uint64_t seed, double std) {
  LlamaWeights w = zeros(config);
  // Each tensor draws from its own stream, so threads may take them in any order.
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < w.tensors_.size(); ++i) {
    NamedTensor& t = w.tensors_[i];
    random_parameter(t.shape, i, seed, std, t.data);
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
