// The whole LLaMA graph, differentiated by autodiff, against finite
// differences of the loss: every parameter of a 2-layer model with grouped
// query heads, in float64.
#include "model/llama_graph.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "testing/numeric.h"

namespace spillway::model {
namespace {

using graph::Value;

LlamaConfig tiny_config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 11;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.rope_theta = 10000;
  c.rope_scaling.llama3 = true;
  c.rope_scaling.factor = 4;
  c.rope_scaling.original_max_position_embeddings = 4;
  c.tie_word_embeddings = tied;
  return c;
}

struct Inputs {
  std::vector<int32_t> tokens, targets;
};

Inputs random_inputs(const LlamaConfig& c, int64_t batch, int64_t seq, uint64_t seed) {
  Inputs in;
  auto u = testing::random_vector(batch * seq * 2, seed, 0, static_cast<double>(c.vocab_size));
  for (int64_t i = 0; i < batch * seq; ++i) {
    in.tokens.push_back(static_cast<int32_t>(u[static_cast<size_t>(i)]));
    in.targets.push_back(static_cast<int32_t>(u[static_cast<size_t>(batch * seq + i)]));
  }
  in.targets[1] = -100;  // one position that does not count
  return in;
}

class LlamaGradient : public ::testing::TestWithParam<bool> {};

TEST_P(LlamaGradient, EveryParameterMatchesFiniteDifferences) {
  const LlamaConfig config = tiny_config(GetParam());
  const int64_t batch = 2, seq = 5;
  auto space_ptr = make_host_heap_space("test:device", MemorySpace::kUnlimited);
  MemorySpace& space = *space_ptr;

  graph::Graph fwd_graph;
  graph::Builder fwd_builder(fwd_graph, DType::f64);
  LlamaGraph fwd = build_llama(fwd_builder, config, batch, seq);
  fwd_graph.mark_output(fwd.loss);

  graph::Graph train_graph;
  graph::Builder train_builder(train_graph, DType::f64);
  LlamaGraph train = build_llama(train_builder, config, batch, seq);
  train_graph.mark_output(train.loss);
  graph::Gradients grads = graph::append_backward(train_builder, train.loss, train.parameters);

  Inputs in = random_inputs(config, batch, seq, 7);
  std::vector<std::vector<double>> params;
  for (size_t i = 0; i < fwd.parameters.size(); ++i) {
    params.push_back(testing::random_vector(fwd_graph.value(fwd.parameters[i]).shape.numel(), 100 + i, -0.6, 0.6));
  }

  exec::CpuExecutor forward(fwd_graph, space);
  exec::CpuExecutor step(train_graph, space);
  for (auto* e : {&forward, &step}) {
    const auto& m = e == &forward ? fwd : train;
    e->bind(m.tokens, std::span<int32_t>(in.tokens));
    e->bind(m.targets, std::span<int32_t>(in.targets));
    for (size_t i = 0; i < params.size(); ++i) e->bind(m.parameters[i], std::span<double>(params[i]));
  }
  step.run();
  forward.run();
  EXPECT_NEAR(step.read<double>(train.loss)[0], forward.read<double>(fwd.loss)[0], 1e-12);

  auto loss = [&] {
    forward.run();
    return forward.read<double>(fwd.loss)[0];
  };
  for (size_t i = 0; i < params.size(); ++i) {
    std::span<const double> g = step.read<double>(grads[train.parameters[i]]);
    std::vector<double> analytic(g.begin(), g.end());
    std::vector<double> numeric = testing::numeric_gradient(params[i], loss, 1e-5);
    EXPECT_LT(testing::rel_error(analytic, numeric), 1e-6) << fwd_graph.value(fwd.parameters[i]).name;
    double norm = 0;
    for (double x : numeric) norm += x * x;
    EXPECT_GT(norm, 0) << fwd_graph.value(fwd.parameters[i]).name << " has no gradient at all";
  }
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, LlamaGradient, ::testing::Values(false, true));

TEST(LlamaGraph, ParametersHaveHuggingFaceNames) {
  graph::Graph g;
  graph::Builder b(g, DType::f32);
  LlamaGraph m = build_llama(b, tiny_config(false), 1, 3);
  EXPECT_EQ(g.value(m.parameters.front()).name, "model.embed_tokens.weight");
  EXPECT_EQ(g.value(m.parameters[1]).name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(g.value(m.parameters.back()).name, "lm_head.weight");
  EXPECT_EQ(m.parameters.size(), 1u + 2 * 9 + 2);
  EXPECT_EQ(g.value(m.logits).shape, (Shape{1, 3, 11}));
}

// The stacked q|k|v weight (one matmul, rope over the packed output, attention
// reading it in place) computes the same step as the checkpoint's three
// projections: same loss, and each stacked gradient is the three gradients
// back to back.
TEST_P(LlamaGradient, FusedProjectionsTrainLikeTheCheckpointsProjections) {
  const LlamaConfig config = tiny_config(GetParam());
  const int64_t batch = 2, seq = 5;
  auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
  struct Run {
    graph::Graph graph;
    LlamaGraph model;
    graph::Gradients grads;
  } plain, fused;
  for (Run* r : {&plain, &fused}) {
    graph::Builder b(r->graph, DType::f64);
    r->model = build_llama(b, config, batch, seq, {.fused_projections = r == &fused});
    r->graph.mark_output(r->model.loss);
    r->grads = graph::append_backward(b, r->model.loss, r->model.parameters);
  }
  ASSERT_EQ(plain.model.parameters.size(), fused.model.parameters.size() + 3 * config.num_hidden_layers);

  // The checkpoint's tensors, and the same numbers stacked for the fused graph.
  std::vector<std::vector<double>> tensors;
  for (size_t i = 0; i < plain.model.parameters.size(); ++i) {
    tensors.push_back(
        testing::random_vector(plain.graph.value(plain.model.parameters[i]).shape.numel(), 300 + i, -0.6, 0.6));
  }
  std::vector<std::vector<double>> stacked;
  int next = 0;
  for (size_t i = 0; i < fused.model.parameters.size(); ++i) {
    stacked.emplace_back();
    for (int t : fused.model.parameter_parts[i]) {
      EXPECT_EQ(t, next++) << "parts must list the checkpoint's tensors once each, in order";
      stacked.back().insert(stacked.back().end(), tensors[static_cast<size_t>(t)].begin(),
                            tensors[static_cast<size_t>(t)].end());
    }
    EXPECT_EQ(static_cast<int64_t>(stacked.back().size()), fused.graph.value(fused.model.parameters[i]).shape.numel());
  }
  EXPECT_EQ(next, static_cast<int>(tensors.size()));

  Inputs in = random_inputs(config, batch, seq, 11);
  exec::CpuExecutor run_plain(plain.graph, *space), run_fused(fused.graph, *space);
  for (auto [run, r, params] : {std::tuple{&run_plain, &plain, &tensors}, std::tuple{&run_fused, &fused, &stacked}}) {
    run->bind(r->model.tokens, std::span<int32_t>(in.tokens));
    run->bind(r->model.targets, std::span<int32_t>(in.targets));
    for (size_t i = 0; i < params->size(); ++i) run->bind(r->model.parameters[i], std::span<double>((*params)[i]));
    run->run();
  }
  EXPECT_NEAR(run_fused.read<double>(fused.model.loss)[0], run_plain.read<double>(plain.model.loss)[0], 1e-12);
  for (size_t i = 0; i < fused.model.parameters.size(); ++i) {
    std::span<const double> g = run_fused.read<double>(fused.grads[fused.model.parameters[i]]);
    size_t at = 0;
    for (int t : fused.model.parameter_parts[i]) {
      std::span<const double> want = run_plain.read<double>(plain.grads[plain.model.parameters[static_cast<size_t>(t)]]);
      std::vector<double> got(g.begin() + static_cast<std::ptrdiff_t>(at), g.begin() + static_cast<std::ptrdiff_t>(at + want.size()));
      EXPECT_LT(testing::rel_error(got, std::vector<double>(want.begin(), want.end())), 1e-12)
          << plain.graph.value(plain.model.parameters[static_cast<size_t>(t)]).name;
      at += want.size();
    }
  }
}

// The engines' arrays for stacked parameters: a stack's tensors back to
// back, each stack on an aligned start; a subset of stacks (the gradient
// sums that stay on the device, say) is laid out on its own.
TEST(StackedOffsets, StacksLieBackToBackFromAlignedStarts) {
  const std::vector<int64_t> numel = {5, 3, 2, 2, 7};
  const std::vector<std::vector<int>> stacks = {{0}, {1, 2, 3}, {4}};
  EXPECT_EQ(stacked_offsets(stacks, numel, 4), (std::vector<uint64_t>{0, 8, 11, 13, 16, 24}));
  EXPECT_EQ(stacked_offsets(stacks, numel, 1), (std::vector<uint64_t>{0, 5, 8, 10, 12, 19}));
  EXPECT_EQ(stacked_offsets({{1, 2, 3}}, numel, 4), (std::vector<uint64_t>{0, 0, 3, 5, 0, 8}));
  EXPECT_EQ(stacked_offsets({}, numel, 4).back(), 0u);
}

// The GPU engine lays out the weight-decayed stacks first and the rest
// after them, and updates [0, length of the first group's own layout) with
// decay: that needs the first group to lie in the combined layout exactly as
// it lies alone, and the rest to start at or after its length.
TEST(StackedOffsets, ALeadingGroupLiesAsItDoesAlone) {
  const std::vector<int64_t> numel = {5, 3, 2, 2, 7, 1};
  const std::vector<std::vector<int>> first = {{1, 2, 3}, {4}}, rest = {{0}, {5}};
  std::vector<std::vector<int>> all = first;
  all.insert(all.end(), rest.begin(), rest.end());
  for (uint64_t align : {1, 4, 128}) {
    const std::vector<uint64_t> alone = stacked_offsets(first, numel, align);
    const std::vector<uint64_t> combined = stacked_offsets(all, numel, align);
    for (const auto& stack : first) {
      for (int t : stack) EXPECT_EQ(combined[static_cast<size_t>(t)], alone[static_cast<size_t>(t)]) << t;
    }
    for (const auto& stack : rest) {
      for (int t : stack) EXPECT_GE(combined[static_cast<size_t>(t)], alone.back()) << t;
    }
  }
}

}  // namespace
}  // namespace spillway::model
