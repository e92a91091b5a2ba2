// The harness of the op sweep (tests/ops/op_sweep_test.cc, and its GPU half
// op_sweep_cuda_test.cc): a case per registered op and fused form builds a
// small graph around the op at any dtype, from inputs drawn fresh for each
// case; the harness runs it on a backend with every allocation poisoned and
// reads its outputs back as doubles.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "device/memory_space.h"
#include "exec/executor.h"
#include "graph/builder.h"
#include "graph/op_def.h"
#include "testing/numeric.h"

namespace spillway::testing {

// How a case's input is drawn, and which dtype it takes in a graph of a
// given activation dtype.
enum class InputRole : uint8_t {
  activation,  // the graph's dtype
  statistic,   // its accumulation dtype (rstd, lse, a loss's gradient, fp32 gradient sums)
  parameter,   // the graph's dtype, a parameter
  ids,         // i32 in [0, bound), the last one -100 when `ignored`
  weights,     // like a statistic, but taking no gradient (a loss's per-token weights)
};

struct InputSpec {
  graph::Value value;
  InputRole role;
  double lo = -1, hi = 1;
  int32_t bound = 0;
  bool ignored = false;
  uint64_t seed = 0;
  bool differentiable() const { return role != InputRole::ids && role != InputRole::weights; }
};

// What a case builds its graph with: the builder, and the inputs it asks
// for, each drawn from a seed of its own.
class SweepInputs {
 public:
  SweepInputs(graph::Builder& b, uint64_t seed) : b(b), seed_(seed) {}
  graph::Builder& b;

  graph::Value activation(std::string_view name, Shape shape, double lo = -1, double hi = 1) {
    return add(b.input(name, std::move(shape), b.dtype()), InputRole::activation, lo, hi);
  }
  graph::Value statistic(std::string_view name, Shape shape, double lo = -1, double hi = 1) {
    return add(b.input(name, std::move(shape), graph::accumulation_dtype(b.dtype())), InputRole::statistic, lo, hi);
  }
  graph::Value weights(std::string_view name, Shape shape, double lo, double hi) {
    return add(b.input(name, std::move(shape), graph::accumulation_dtype(b.dtype())), InputRole::weights, lo, hi);
  }
  graph::Value parameter(std::string_view name, Shape shape, double lo = -1, double hi = 1) {
    return add(b.parameter(name, std::move(shape)), InputRole::parameter, lo, hi);
  }
  graph::Value ids(std::string_view name, Shape shape, int32_t bound, bool ignored = false) {
    const graph::Value v = add(b.input(name, std::move(shape), DType::i32), InputRole::ids, 0, 0);
    specs_.back().bound = bound;
    specs_.back().ignored = ignored;
    return v;
  }
  const std::vector<InputSpec>& specs() const { return specs_; }

 private:
  graph::Value add(graph::Value v, InputRole role, double lo, double hi) {
    specs_.push_back(InputSpec{v, role, lo, hi, 0, false, seed_ + specs_.size()});
    return v;
  }

  uint64_t seed_;
  std::vector<InputSpec> specs_;
};

// One op, or one fused form of it, in a small graph.
struct SweepCase {
  std::string label;  // a gtest name: letters, digits and underscores
  graph::OpKind kind;
  graph::Fused fused = graph::Fused::none;
  // Builds the graph (unfused) and returns the values compared; the first
  // is what a gradient check differentiates.
  std::function<std::vector<graph::Value>(SweepInputs&)> build;
  // For a fused form: the pass that makes it from the graph `build` made.
  std::function<graph::Graph(const graph::Graph&)> fuse = nullptr;
  // Whether the first output's gradient is checked against finite
  // differences (an op with a backward rule and float inputs).
  bool gradient = false;
  // For a fused form: the unfused graph's bits (its contract says so), or
  // within f32 rounding of them.
  bool same_bits = false;
  double f32_tolerance = 1e-5;   // the f32 graph against the f64 one
  double bf16_tolerance = 2e-2;  // the GPU's bf16 graph against the CPU's f32 one
};

// The seed a case's inputs are drawn from: its own, from its label.
inline uint64_t sweep_seed(const SweepCase& c) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char ch : c.label) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h % 1000003 * 1000;
}

// gtest names a failing case by its label.
inline void PrintTo(const SweepCase& c, std::ostream* os) { *os << c.label; }

// A case's graph at one activation dtype, fused when the case is.
struct SweepGraph {
  graph::Graph graph;
  std::vector<InputSpec> inputs;
  std::vector<graph::Value> outputs;
};

inline SweepGraph build_sweep_graph(const SweepCase& c, DType dtype, uint64_t seed, bool fused) {
  SweepGraph s;
  graph::Builder b(s.graph, dtype);
  SweepInputs in(b, seed);
  s.outputs = c.build(in);
  s.inputs = in.specs();
  for (graph::Value v : s.outputs) s.graph.mark_output(v);
  if (fused && c.fuse) s.graph = c.fuse(s.graph);
  return s;
}

inline bool has_node(const graph::Graph& g, graph::OpKind kind, graph::Fused fused) {
  for (const graph::Node& n : g.nodes()) {
    if (n.kind == kind && n.attrs.fused == fused) return true;
  }
  return false;
}

// The input's values, each rounded to `narrowest` (f32 for the CPU sweep,
// bf16 for the GPU's, whose statistics stay f32) so that graphs of every
// dtype read the same numbers. Never zeros: uniform draws, or ids.
inline std::vector<double> sweep_values(const InputSpec& s, int64_t n, DType narrowest) {
  std::vector<double> v;
  if (s.role == InputRole::ids) {
    std::mt19937_64 rng(s.seed);
    for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>(rng() % static_cast<uint64_t>(s.bound)));
    if (s.ignored) v.back() = -100;
    return v;
  }
  const bool bf16_rounded =
      narrowest == DType::bf16 && s.role != InputRole::statistic && s.role != InputRole::weights;
  for (double x : random_vector(n, s.seed, s.lo, s.hi)) {
    const float f = static_cast<float>(x);
    v.push_back(bf16_rounded ? to_float(to_bf16(f)) : f);
  }
  return v;
}

// Host bytes of `values` in `dtype`, and back.
inline std::vector<char> to_bytes(const std::vector<double>& values, DType dtype) {
  std::vector<char> out(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    char* at = out.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::f64: std::memcpy(at, &values[i], 8); break;
      case DType::f32: { const float f = static_cast<float>(values[i]); std::memcpy(at, &f, 4); break; }
      case DType::bf16: { const bf16 h = to_bf16(static_cast<float>(values[i])); std::memcpy(at, &h, 2); break; }
      case DType::i32: { const int32_t k = static_cast<int32_t>(values[i]); std::memcpy(at, &k, 4); break; }
      default: throw Error("op sweep", std::string("no inputs of ") + std::string(dtype_name(dtype)));
    }
  }
  return out;
}

inline std::vector<double> from_bytes(const void* data, int64_t n, DType dtype) {
  std::vector<double> out(static_cast<size_t>(n));
  const char* at = static_cast<const char*>(data);
  for (size_t i = 0; i < out.size(); ++i, at += dtype_size(dtype)) {
    switch (dtype) {
      case DType::f64: std::memcpy(&out[i], at, 8); break;
      case DType::f32: { float f; std::memcpy(&f, at, 4); out[i] = f; break; }
      case DType::bf16: { bf16 h; std::memcpy(&h, at, 2); out[i] = to_float(h); break; }
      default: throw Error("op sweep", std::string("no outputs of ") + std::string(dtype_name(dtype)));
    }
  }
  return out;
}

// Host memory that comes filled with 0xFF bytes, NaN in f32, f64 and bf16:
// an output element a kernel fails to write fails every comparison.
class PoisonedHeap final : public MemoryBacking {
 public:
  void* allocate(uint64_t bytes, std::string_view) override {
    void* p = std::aligned_alloc(MemorySpace::kAlignment, bytes);
    std::memset(p, 0xff, bytes);
    return p;
  }
  void free(void* ptr, uint64_t) override { std::free(ptr); }
};

// A sweep graph made runnable on the CPU, its inputs bound to buffers the
// caller can change between runs (finite differences).
class CpuSweepRun {
 public:
  CpuSweepRun(const graph::Graph& g, const std::vector<InputSpec>& inputs, DType narrowest)
      : graph_(g),
        space_("sweep:cpu", MemorySpace::kUnlimited, std::make_unique<PoisonedHeap>()),
        executor_(graph_, space_),
        inputs_(inputs) {
    for (const InputSpec& s : inputs) {
      const graph::ValueInfo& info = graph_.value(s.value);
      buffers_.push_back(to_bytes(sweep_values(s, info.shape.numel(), narrowest), info.dtype));
      executor_.bind(s.value, static_cast<void*>(buffers_.back().data()));
    }
  }

  void run() { executor_.run(); }
  std::vector<double> read(graph::Value v) const {
    const graph::ValueInfo& info = graph_.value(v);
    return from_bytes(executor_.data(v), info.shape.numel(), info.dtype);
  }
  // Input k's values, as first drawn; and new ones for it, from the next run on.
  std::vector<double> input(size_t k) const { return from_bytes(buffers_[k].data(), count(k), dtype(k)); }
  void set_input(size_t k, const std::vector<double>& values) {
    const std::vector<char> bytes = to_bytes(values, dtype(k));
    std::memcpy(buffers_[k].data(), bytes.data(), bytes.size());
  }

 private:
  int64_t count(size_t k) const { return graph_.value(inputs_[k].value).shape.numel(); }
  DType dtype(size_t k) const { return graph_.value(inputs_[k].value).dtype; }

  graph::Graph graph_;
  MemorySpace space_;
  exec::CpuExecutor executor_;
  std::vector<InputSpec> inputs_;
  std::vector<std::vector<char>> buffers_;
};

}  // namespace spillway::testing
