// A LLaMA training step as the graph-pass tests build it, and a run of it on
// the CPU from seeded inputs: a pass's output graph keeps the step's value
// ids, so it runs with the same bindings, and its loss and gradients can be
// compared with those of the graph it came from.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "model/llama_graph.h"
#include "testing/llama.h"
#include "testing/numeric.h"

namespace spillway::testing {

// T is the element type of every floating-point value: float or double.
template <typename T>
struct LlamaStep {
  model::LlamaConfig config;
  int64_t batch = 0, seq = 0;
  graph::GradientOutput output = graph::GradientOutput::fresh;
  graph::Graph graph;
  model::LlamaGraph model;
  graph::Gradients grads;
};

// Forward, the loss as the graph's output, and the backward to every parameter.
template <typename T>
LlamaStep<T> build_llama_step(const model::LlamaConfig& config, int64_t batch, int64_t seq,
                              graph::GradientOutput output = graph::GradientOutput::fresh,
                              const model::LlamaGraphOptions& options = {}) {
  LlamaStep<T> s;
  s.config = config;
  s.batch = batch;
  s.seq = seq;
  s.output = output;
  graph::Builder b(s.graph, dtype_of<T>());
  s.model = model::build_llama(b, config, batch, seq, options);
  s.graph.mark_output(s.model.loss);
  s.grads = graph::append_backward(b, s.model.loss, s.model.parameters, output);
  return s;
}

// What a run feeds the step. Micro-batch m draws its tokens from
// token_seed + 2m and its targets from target_seed + 2m, so that with
// target_seed = token_seed + 1 no stream is drawn twice.
struct LlamaStepInputs {
  uint64_t token_seed = 1, target_seed = 2;
  uint64_t parameter_seed = 0;  // parameter i: uniform in [-0.5, 0.5) from parameter_seed + i
  // A target set to -100 in every micro-batch: a row the loss does not count.
  std::optional<size_t> ignored_target = std::nullopt;
  int micro_batches = 1;
  // With accumulated gradients, the caller's buffers start out holding an
  // earlier sum: gradient i's from with_negative_zeros(accumulated_seed + i).
  uint64_t accumulated_seed = 0;
};

// The small LLaMA step with stacked q|k|v and gate|up projections, and its
// inputs, that the epilogue-fusion tests (graph/fuse_matmul_*) rewrite.
inline LlamaStep<float> fusion_test_step(graph::GradientOutput output) {
  return build_llama_step<float>(llama_config(13, 16, 24, 2, 4, 2), 2, 7, output, {.fused_projections = true});
}
inline const LlamaStepInputs kFusionTestInputs = {.token_seed = 1, .target_seed = 2, .parameter_seed = 40};

template <typename T>
struct LlamaStepResult {
  std::vector<std::vector<T>> losses;  // one a micro-batch
  // One a parameter, after the last micro-batch: its gradient (fresh), or
  // the running sum in the caller's buffer (accumulated).
  std::vector<std::vector<T>> gradients;
};

// Runs `g`, the step's graph or one a pass made from it, on a fresh CPU
// executor, and checks after each micro-batch that the memory space peaked
// where liveness said it would.
template <typename T>
LlamaStepResult<T> run_llama_step(const graph::Graph& g, const LlamaStep<T>& s, const LlamaStepInputs& in) {
  const auto n = static_cast<size_t>(s.batch * s.seq);
  const auto vocab = static_cast<int32_t>(s.config.vocab_size);
  const std::vector<graph::Value>& parameters = s.model.parameters;
  std::vector<int32_t> tokens(n), targets(n);
  std::vector<std::vector<T>> params;
  for (size_t i = 0; i < parameters.size(); ++i) {
    params.push_back(random_vector<T>(g.value(parameters[i]).shape.numel(), in.parameter_seed + i, -0.5, 0.5));
  }
  auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
  exec::CpuExecutor e(g, *space);
  e.bind(s.model.tokens, std::span<int32_t>(tokens));
  e.bind(s.model.targets, std::span<int32_t>(targets));
  for (size_t i = 0; i < params.size(); ++i) e.bind(parameters[i], std::span<T>(params[i]));

  LlamaStepResult<T> result;
  const bool accumulated = s.output == graph::GradientOutput::accumulated;
  if (accumulated) {
    // Growing result.gradients moves these vectors, not their elements: the
    // addresses bound stay good.
    for (size_t i = 0; i < parameters.size(); ++i) {
      result.gradients.push_back(
          with_negative_zeros<T>(g.value(parameters[i]).shape.numel(), in.accumulated_seed + i));
      e.bind(s.grads[parameters[i]], std::span<T>(result.gradients.back()));
    }
  }
  for (int m = 0; m < in.micro_batches; ++m) {
    // Copied in place: the executor holds the buffers' addresses.
    std::ranges::copy(random_tokens(n, in.token_seed + 2 * static_cast<uint64_t>(m), vocab), tokens.begin());
    std::ranges::copy(random_tokens(n, in.target_seed + 2 * static_cast<uint64_t>(m), vocab), targets.begin());
    if (in.ignored_target) targets.at(*in.ignored_target) = -100;
    e.run();
    EXPECT_EQ(space->peak(), e.liveness().peak_bytes);
    const std::span<const T> loss = e.read<T>(s.model.loss);
    result.losses.emplace_back(loss.begin(), loss.end());
  }
  if (!accumulated) {
    for (graph::Value p : parameters) {
      const std::span<const T> grad = e.read<T>(s.grads[p]);
      result.gradients.emplace_back(grad.begin(), grad.end());
    }
  }
  return result;
}

// Calls compare(got's, want's, name) on each loss, then on each gradient.
template <typename T, typename Compare>
void compare_results(const LlamaStepResult<T>& got, const LlamaStepResult<T>& want, const LlamaStep<T>& s,
                     Compare compare) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  ASSERT_EQ(got.gradients.size(), want.gradients.size());
  for (size_t m = 0; m < want.losses.size(); ++m) {
    compare(got.losses[m], want.losses[m],
            want.losses.size() == 1 ? std::string("loss") : "loss of micro-batch " + std::to_string(m));
  }
  for (size_t i = 0; i < want.gradients.size(); ++i) {
    compare(got.gradients[i], want.gradients[i], s.graph.value(s.model.parameters[i]).name);
  }
}

// Bit for bit, so a -0 that became +0 fails; a difference prints as bytes.
template <typename T>
void expect_same_bits(const LlamaStepResult<T>& got, const LlamaStepResult<T>& want, const LlamaStep<T>& s) {
  compare_results(got, want, s, [](const std::vector<T>& g, const std::vector<T>& w, const std::string& name) {
    EXPECT_EQ(bytes_of<T>(g), bytes_of<T>(w)) << name;
  });
}

// Equal up to rounding, each element within tolerance * (1 + |want|): for a
// pass that changes how many intermediates are rounded.
template <typename T>
void expect_close(const LlamaStepResult<T>& got, const LlamaStepResult<T>& want, const LlamaStep<T>& s,
                  double tolerance) {
  compare_results(got, want, s, [&](const std::vector<T>& g, const std::vector<T>& w, const std::string& name) {
    ASSERT_EQ(g.size(), w.size()) << name;
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(g[i], w[i], tolerance * (1 + std::abs(static_cast<double>(w[i])))) << name << "[" << i << "]";
    }
  });
}

}  // namespace spillway::testing
