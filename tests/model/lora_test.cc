// LoRA adapters in the LLaMA graph (model/lora.h): the adapted forward is
// the base model with the adapters merged into its weights, every adapter's
// gradient matches float64 finite differences, and the frozen base weights
// get no gradient at all.
#include "model/lora.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <vector>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "model/llama_graph.h"
#include "testing/llama.h"
#include "testing/numeric.h"

namespace spillway::model {
namespace {

LlamaConfig small() { return testing::llama_config(13, 16, 24, 2, 4, 2); }

LoraConfig all_projections(int64_t rank, double alpha) {
  return {.rank = rank, .alpha = alpha, .dropout = 0, .targets = parse_lora_targets("all", "test")};
}

// The LoRA graph in T over one batch, its base weights, adapters and the
// scaling bound; runs it and hands back the loss (and, where `backward`,
// each adapter's gradient).
template <typename T>
class LoraStep {
 public:
  // `dropout`: the training graph's dropout on the adapters' input
  // (lora.dropout > 0), drawn with `key`.
  LoraStep(const LlamaConfig& config, const LoraConfig& lora, int64_t batch, int64_t seq, bool backward,
           bool dropout = false)
      : b_(g_, dtype_of<T>()) {
    m_ = build_llama(b_, config, batch, seq, {.lora = &lora, .adapter_dropout = dropout});
    g_.mark_output(m_.loss);
    g_.mark_output(m_.logits);
    if (backward) grads_ = graph::append_backward(b_, m_.loss, m_.adapters);
    const auto n = static_cast<size_t>(batch * seq);
    tokens_ = testing::random_tokens(n, 3, static_cast<int32_t>(config.vocab_size));
    targets_ = testing::random_tokens(n, 4, static_cast<int32_t>(config.vocab_size));
    for (size_t i = 0; i < m_.parameters.size(); ++i) {
      base.push_back(testing::random_vector<T>(g_.value(m_.parameters[i]).shape.numel(), 10 + i, -0.5, 0.5));
    }
    for (size_t i = 0; i < m_.adapters.size(); ++i) {
      adapters.push_back(testing::random_vector<T>(g_.value(m_.adapters[i]).shape.numel(), 50 + i, -0.5, 0.5));
    }
    scaling_.assign(static_cast<size_t>(lora.rank * lora.rank), T(0));
    for (int64_t i = 0; i < lora.rank; ++i) scaling_[static_cast<size_t>(i * lora.rank + i)] = T(lora.scaling());
  }

  double run() {
    auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
    exec::CpuExecutor e(g_, *space);
    e.bind(m_.tokens, std::span<int32_t>(tokens_));
    e.bind(m_.targets, std::span<int32_t>(targets_));
    e.bind(m_.lora_scaling, std::span<T>(scaling_));
    if (m_.dropout_key.valid()) e.bind(m_.dropout_key, std::span<int32_t>(key));
    for (size_t i = 0; i < base.size(); ++i) e.bind(m_.parameters[i], std::span<T>(base[i]));
    for (size_t i = 0; i < adapters.size(); ++i) e.bind(m_.adapters[i], std::span<T>(adapters[i]));
    e.run();
    const std::span<const T> logits = e.read<T>(m_.logits);
    logits_.assign(logits.begin(), logits.end());
    gradients.clear();
    if (!grads_.of.empty()) {
      for (graph::Value a : m_.adapters) {
        const std::span<const T> grad = e.read<T>(grads_[a]);
        gradients.emplace_back(grad.begin(), grad.end());
      }
    }
    return static_cast<double>(e.read<T>(m_.loss)[0]);
  }

  const graph::Graph& graph() const { return g_; }
  const LlamaGraph& model() const { return m_; }
  const std::vector<T>& logits() const { return logits_; }

  std::vector<std::vector<T>> base, adapters, gradients;
  std::array<int32_t, 2> key = {12345, 678};

 private:
  graph::Graph g_;
  graph::Builder b_;
  LlamaGraph m_;
  graph::Gradients grads_;
  std::vector<int32_t> tokens_, targets_;
  std::vector<T> scaling_, logits_;
};

TEST(LoraTargets, ParseShortAndFullNamesInLayerOrder) {
  EXPECT_EQ(parse_lora_targets("v,q", "--lora-targets"), (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(parse_lora_targets("down_proj, gate", "--lora-targets"),
            (std::vector<std::string>{"gate_proj", "down_proj"}));
  EXPECT_EQ(parse_lora_targets("all", "--lora-targets").size(), 7u);
  try {
    parse_lora_targets("q,lm_head", "--lora-targets");
    FAIL() << "lm_head was taken";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--lora-targets: 'lm_head' is not a projection LoRA can adapt: q, k, v, o, gate, up, "
                           "down (or all)");
  }
  EXPECT_THROW(parse_lora_targets(" , ", "--lora-targets"), Error);
}

TEST(LoraConfig, RefusesWhatIsOutOfRange) {
  LoraConfig lora = all_projections(4, 8);
  EXPECT_NO_THROW(check_lora_config(lora, "lora"));
  lora.dropout = 0.05;
  EXPECT_NO_THROW(check_lora_config(lora, "lora"));
  for (double bad : {1.0, -0.1, std::nan("")}) {
    lora.dropout = bad;
    try {
      check_lora_config(lora, "lora");
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(" must be at least 0 and below 1"), std::string::npos) << e.what();
    }
  }
  lora = all_projections(0, 8);
  EXPECT_THROW(check_lora_config(lora, "lora"), Error);
  lora = all_projections(4, -1);
  EXPECT_THROW(check_lora_config(lora, "lora"), Error);
}

TEST(LoraSpecs, NamesAndShapesFollowPeft) {
  const LoraConfig lora = {.rank = 3, .alpha = 6, .targets = parse_lora_targets("q,o,down", "test")};
  const std::vector<ParameterSpec> specs = lora_specs(small(), lora);
  ASSERT_EQ(specs.size(), 2u * 3u * 2u);  // A and B, three projections, two layers
  EXPECT_EQ(specs[0].name, "model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(specs[0].shape, (Shape{3, 16}));
  EXPECT_EQ(specs[1].name, "model.layers.0.self_attn.q_proj.lora_B.weight");
  EXPECT_EQ(specs[1].shape, (Shape{16, 3}));
  EXPECT_EQ(specs[2].name, "model.layers.0.self_attn.o_proj.lora_A.weight");
  EXPECT_EQ(specs[5].name, "model.layers.0.mlp.down_proj.lora_B.weight");
  EXPECT_EQ(specs[4].shape, (Shape{3, 24}));
  EXPECT_EQ(specs[5].shape, (Shape{16, 3}));
  EXPECT_EQ(specs[6].name, "model.layers.1.self_attn.q_proj.lora_A.weight");
}

TEST(LoraWeights, InitLeavesTheModelAsItWas) {
  const LoraConfig lora = all_projections(4, 8);
  const LoraWeights w = LoraWeights::init(small(), lora, 7);
  for (const NamedTensor& t : w.tensors()) {
    const bool is_b = t.name.ends_with(".lora_B.weight");
    const float bound = 1.0f / std::sqrt(static_cast<float>(t.shape[1]));
    const bool all_zero = std::all_of(t.data.begin(), t.data.end(), [](float x) { return x == 0.0f; });
    EXPECT_EQ(all_zero, is_b) << t.name;
    for (float x : t.data) EXPECT_LE(std::abs(x), bound) << t.name;
  }
}

// The adapted model's logits are the plain model's over W + (alpha / r) B A.
TEST(LoraGraph, ForwardEqualsTheBaseWithAdaptersMerged) {
  const LlamaConfig config = small();
  const LoraConfig lora = {.rank = 3, .alpha = 5, .targets = parse_lora_targets("q,k,v,o,gate,up,down", "test")};
  LoraStep<double> adapted(config, lora, 2, 5, false);
  adapted.run();

  LlamaWeights base = LlamaWeights::zeros(config);
  LoraWeights adapters = LoraWeights::zeros(config, lora);
  ASSERT_EQ(base.tensors().size(), adapted.base.size());
  ASSERT_EQ(adapters.tensors().size(), adapted.adapters.size());
  for (size_t i = 0; i < adapted.base.size(); ++i) {
    base.tensors()[i].data.assign(adapted.base[i].begin(), adapted.base[i].end());
  }
  for (size_t i = 0; i < adapted.adapters.size(); ++i) {
    adapters.tensors()[i].data.assign(adapted.adapters[i].begin(), adapted.adapters[i].end());
  }
  const LlamaWeights merged = merge_lora(base, adapters);

  graph::Graph g;
  graph::Builder b(g, DType::f64);
  const LlamaGraph plain = build_llama(b, config, 2, 5);
  g.mark_output(plain.logits);
  std::vector<std::vector<double>> weights;
  for (const NamedTensor& t : merged.tensors()) weights.emplace_back(t.data.begin(), t.data.end());
  auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
  exec::CpuExecutor e(g, *space);
  std::vector<int32_t> tokens = testing::random_tokens(10, 3, 13), targets = testing::random_tokens(10, 4, 13);
  e.bind(plain.tokens, std::span<int32_t>(tokens));
  e.bind(plain.targets, std::span<int32_t>(targets));
  for (size_t i = 0; i < weights.size(); ++i) e.bind(plain.parameters[i], std::span<double>(weights[i]));
  e.run();
  const std::span<const double> want = e.read<double>(plain.logits);
  // merge_lora keeps fp32 weights, so the two agree to fp32's rounding of W.
  EXPECT_LT(testing::rel_error(adapted.logits(), std::vector<double>(want.begin(), want.end())), 1e-6);
}

// Every element of every adapter against central differences in float64.
TEST(LoraGraph, AdapterGradientsMatchFiniteDifferences) {
  const LoraConfig lora = {.rank = 2, .alpha = 3, .targets = parse_lora_targets("all", "test")};
  LoraStep<double> step(small(), lora, 2, 4, true);
  step.run();
  const std::vector<std::vector<double>> analytic = step.gradients;
  ASSERT_EQ(analytic.size(), step.adapters.size());
  for (size_t i = 0; i < step.adapters.size(); ++i) {
    const std::vector<double> numeric = testing::numeric_gradient(step.adapters[i], [&] { return step.run(); });
    EXPECT_LT(testing::rel_error(analytic[i], numeric), 1e-6)
        << step.graph().value(step.model().adapters[i]).name;
  }
}

// With dropout on the adapters' input, each adapter's gradient still
// matches central differences: the draws are fixed by the key.
TEST(LoraGraph, DropoutGradientsMatchFiniteDifferences) {
  LoraConfig lora = {.rank = 2, .alpha = 3, .dropout = 0.3, .targets = parse_lora_targets("all", "test")};
  LoraStep<double> step(small(), lora, 2, 4, true, true);
  const size_t drops = static_cast<size_t>(std::count_if(step.graph().nodes().begin(), step.graph().nodes().end(),
                                                         [](const graph::Node& n) {
                                                           return n.kind == graph::OpKind::dropout && !n.backward;
                                                         }));
  EXPECT_EQ(drops, step.adapters.size() / 2) << "one dropout per adapter";
  step.run();
  const std::vector<std::vector<double>> analytic = step.gradients;
  for (size_t i = 0; i < step.adapters.size(); ++i) {
    const std::vector<double> numeric = testing::numeric_gradient(step.adapters[i], [&] { return step.run(); });
    EXPECT_LT(testing::rel_error(analytic[i], numeric), 1e-6)
        << step.graph().value(step.model().adapters[i]).name;
  }
}

// Dropout reaches the adapters' path alone: with every B zero the model is
// the base whatever is dropped; with B trained, the key decides the logits.
TEST(LoraGraph, DropoutDropsTheAdaptersInputOnly) {
  LoraConfig lora = {.rank = 2, .alpha = 3, .dropout = 0.5, .targets = parse_lora_targets("all", "test")};
  LoraStep<double> plain(small(), lora, 2, 4, false), dropped(small(), lora, 2, 4, false, true);
  ASSERT_FALSE(plain.model().dropout_key.valid()) << "evaluation drops nothing";
  plain.run();
  dropped.run();
  EXPECT_NE(plain.logits(), dropped.logits());
  const std::vector<double> first = dropped.logits();
  dropped.key[0] += 1;
  dropped.run();
  EXPECT_NE(dropped.logits(), first);
  dropped.key[0] -= 1;
  dropped.run();
  EXPECT_EQ(dropped.logits(), first) << "the same key draws the same";
  for (size_t i = 1; i < dropped.adapters.size(); i += 2) {
    std::fill(plain.adapters[i].begin(), plain.adapters[i].end(), 0.0);
    std::fill(dropped.adapters[i].begin(), dropped.adapters[i].end(), 0.0);
  }
  plain.run();
  dropped.run();
  EXPECT_EQ(plain.logits(), dropped.logits());
}

// The base weights are frozen: graph inputs, and no backward node makes a
// gradient of their shape (dW = dY^T X is a transposed product).
TEST(LoraGraph, FrozenBaseWeightsGetNoGradient) {
  const LoraConfig lora = {.rank = 2, .alpha = 3, .targets = parse_lora_targets("all", "test")};
  LoraStep<float> step(small(), lora, 1, 3, true);
  const graph::Graph& g = step.graph();
  std::vector<Shape> frozen;
  for (graph::Value p : step.model().parameters) {
    EXPECT_EQ(g.value(p).role, graph::ValueRole::input) << g.value(p).name;
    if (g.value(p).shape.rank() == 2) frozen.push_back(g.value(p).shape);
  }
  EXPECT_TRUE(g.parameters().size() == step.model().adapters.size());
  int adapter_gradients = 0;
  for (const graph::Node& n : g.nodes()) {
    if (!n.backward || n.kind != graph::OpKind::matmul || !n.attrs.trans_a) continue;
    const Shape& out = g.value(n.outputs[0]).shape;
    EXPECT_EQ(std::count(frozen.begin(), frozen.end(), out), 0) << graph::node_label(n);
    ++adapter_gradients;
  }
  EXPECT_GE(adapter_gradients, static_cast<int>(step.model().adapters.size()));
}

}  // namespace
}  // namespace spillway::model
