// Recomputation on a real LLaMA step: the transformed graph must give the
// same loss and gradients bit for bit (same kernels on the same inputs), the
// backward must stop reading what the policy drops, and the liveness peak
// must fall.
#include "graph/recompute.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "base/status.h"
#include "device/memory_space.h"
#include "graph/liveness.h"
#include "testing/llama.h"
#include "testing/llama_step.h"

namespace spillway::graph {
namespace {

model::LlamaConfig tiny_config(bool tied) {
  return testing::llama_config(11, 16, 24, 2, 4, 2, tied); // grouped-query attention
}

// Activations dominate: long sequence, small vocabulary and model.
model::LlamaConfig activation_heavy_config() {
  return testing::llama_config(16, 32, 64, 4, 4, 2);
}

enum class Rule { none, layers, selective, kinds, drop_everything };

std::string rule_name(Rule r) {
  switch (r) {
    case Rule::none: return "none";
    case Rule::layers: return "layers";
    case Rule::selective: return "selective";
    case Rule::kinds: return "kinds";
    case Rule::drop_everything: return "drop_everything";
  }
  return "?";
}

void PrintTo(Rule r, std::ostream* os) { *os << rule_name(r); }

// What Rule::kinds remakes: a matmul's output, an elementwise op's, a norm's,
// in every layer, as the planner may choose them (train/recompute_choice.h).
const std::vector<std::string> kDroppedKinds = {"self_attn.q_proj", "mlp.swiglu", "input_layernorm"};

Recomputed transform(const Graph& g, Rule r) {
  switch (r) {
    case Rule::none: return recompute(g, RecomputePolicy::none);
    case Rule::layers: return recompute(g, RecomputePolicy::layers);
    case Rule::selective: return recompute(g, RecomputePolicy::selective);
    case Rule::kinds: return recompute(g, keep_rule(kDroppedKinds));
    case Rule::drop_everything: return recompute(g, [](const Graph&, Value) { return false; });
  }
  throw Error("test", "unknown rule");
}

uint64_t allocator_cost(uint64_t n) { return MemorySpace::accounted_bytes(n); }

bool produced_by_forward(const Graph& g, Value v) {
  const ValueInfo& info = g.value(v);
  return info.role == ValueRole::computed && !g.nodes()[static_cast<size_t>(info.producer)].backward;
}

// What each policy allows the backward pass to read of the forward pass,
// written from the policy's meaning rather than from its code.
bool allowed_forward_read(const Graph& g, Value v, Rule r, int64_t layers) {
  if (r == Rule::none || g.is_output(v)) return true;
  if (r == Rule::drop_everything) return false;
  const Node& producer = g.nodes()[static_cast<size_t>(g.value(v).producer)];
  if (!producer.name.starts_with("model.layers.")) return true;  // outside the layers
  for (int64_t i = 0; i < layers; ++i) {
    // The residual stream leaving layer i: the next layer's input, or the final norm's.
    if (v == g.find("model.layers." + std::to_string(i) + ".mlp_residual")) return true;
  }
  if (r == Rule::kinds) {
    for (int64_t i = 0; i < layers; ++i) {
      for (const std::string& kind : kDroppedKinds) {
        if (g.value(v).name == "model.layers." + std::to_string(i) + "." + kind) return false;
      }
    }
    return true;
  }
  return r == Rule::selective && (producer.kind == OpKind::matmul || producer.kind == OpKind::attention);
}

void expect_valid(const Graph& original, const Graph& g) {
  ASSERT_GE(g.values().size(), original.values().size());
  for (size_t v = 0; v < original.values().size(); ++v) {
    const ValueInfo &a = original.values()[v], &b = g.values()[v];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.shape, b.shape) << a.name;
    EXPECT_EQ(a.dtype, b.dtype) << a.name;
    EXPECT_EQ(a.role, b.role) << a.name;
  }
  EXPECT_EQ(g.outputs(), original.outputs());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    for (Value in : n.inputs) {
      const ValueInfo& info = g.value(in);
      if (info.role != ValueRole::computed) continue;
      EXPECT_GE(info.producer, 0) << info.name << " has no producer";
      EXPECT_LT(info.producer, static_cast<int32_t>(i)) << n.name << " reads " << info.name << " before it is made";
    }
    for (Value out : n.outputs) EXPECT_EQ(g.value(out).producer, static_cast<int32_t>(i)) << g.value(out).name;
  }
  for (size_t v = 0; v < g.values().size(); ++v) {
    if (g.values()[v].role == ValueRole::computed) {
      EXPECT_GE(g.values()[v].producer, 0) << g.values()[v].name;
    }
  }
  // The original nodes are all there, in their order, forward ones unchanged.
  std::vector<const Node*> kept;
  for (const Node& n : g.nodes()) {
    if (!n.recompute) kept.push_back(&n);
  }
  ASSERT_EQ(kept.size(), original.nodes().size());
  for (size_t i = 0; i < kept.size(); ++i) {
    const Node &a = original.nodes()[i], &b = *kept[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.kind, b.kind) << a.name;
    EXPECT_EQ(a.outputs, b.outputs) << a.name;
    EXPECT_EQ(a.backward, b.backward) << a.name;
    if (!a.backward) {
      EXPECT_EQ(a.inputs, b.inputs) << a.name;
    }
  }
}

class Recompute : public ::testing::TestWithParam<std::tuple<bool, Rule>> {};

TEST_P(Recompute, LossAndEveryGradientAreBitwiseIdentical) {
  auto [tied, rule] = GetParam();
  const auto s = testing::build_llama_step<float>(tiny_config(tied), 2, 7);
  Recomputed r = transform(s.graph, rule);
  if (rule == Rule::none) {
    EXPECT_EQ(r.stats.nodes_cloned, 0);
    EXPECT_EQ(r.graph.nodes().size(), s.graph.nodes().size());
  } else {
    EXPECT_GT(r.stats.nodes_cloned, 0);
  }
  // One target is -100, a row that does not count.
  const testing::LlamaStepInputs inputs = {
      .token_seed = 7, .target_seed = 8, .parameter_seed = 100, .ignored_target = 1};
  testing::expect_same_bits(testing::run_llama_step(r.graph, s, inputs), testing::run_llama_step(s.graph, s, inputs),
                            s);
}

TEST_P(Recompute, GraphStaysValidAndBackwardReadsOnlyWhatIsKept) {
  auto [tied, rule] = GetParam();
  const auto s = testing::build_llama_step<float>(tiny_config(tied), 2, 7);
  Recomputed r = transform(s.graph, rule);
  const Graph& g = r.graph;
  expect_valid(s.graph, g);

  std::set<std::string> clone_names;
  int clones = 0;
  for (const Node& n : g.nodes()) {
    if (n.recompute) {
      ++clones;
      EXPECT_TRUE(n.backward) << n.name;
      EXPECT_TRUE(n.name.ends_with(" (recompute)")) << n.name;
      // Each forward node is cloned at most once: later readers share the clone.
      EXPECT_TRUE(clone_names.insert(n.name).second) << n.name << " cloned twice";
      for (Value out : n.outputs) {
        EXPECT_GE(out.id, static_cast<int32_t>(s.graph.values().size())) << "a clone overwrote an original value";
        EXPECT_TRUE(g.value(out).name.ends_with(" (recompute)")) << g.value(out).name;
      }
    }
    if (!n.backward) continue;
    for (Value in : n.inputs) {
      if (!produced_by_forward(g, in)) continue;  // an input, a parameter, a backward value or a clone
      EXPECT_TRUE(allowed_forward_read(g, in, rule, s.config.num_hidden_layers))
          << n.name << " reads the dropped forward value " << g.value(in).name;
    }
  }
  EXPECT_EQ(clones, r.stats.nodes_cloned);
  if (rule != Rule::none) {
    EXPECT_GT(r.stats.values_dropped, 0);
  }
  else EXPECT_EQ(r.stats.values_dropped, 0);
}

TEST_P(Recompute, DroppedOriginalsDieInTheForwardPass) {
  auto [tied, rule] = GetParam();
  const auto s = testing::build_llama_step<float>(tiny_config(tied), 2, 7);
  Recomputed r = transform(s.graph, rule);
  Liveness before = analyze_liveness(s.graph, allocator_cost);
  Liveness after = analyze_liveness(r.graph, allocator_cost);
  int32_t first_backward = 0;
  while (!r.graph.nodes()[static_cast<size_t>(first_backward)].backward) ++first_backward;
  int died = 0;
  for (size_t v = 0; v < s.graph.values().size(); ++v) {
    Value val{static_cast<int32_t>(v)};
    const int32_t last = before.of[v].last_use;
    if (!produced_by_forward(s.graph, val) || last == Liveness::kEndOfStep ||
        !s.graph.nodes()[static_cast<size_t>(last)].backward) {
      continue;  // not alive in the backward pass to begin with
    }
    const std::string& name = s.graph.value(val).name;
    if (r.graph.find(name + " (recompute)").valid()) {
      ++died;
      EXPECT_LT(after.of[v].last_use, first_backward) << name << " is recomputed yet still alive in the backward";
    } else {
      EXPECT_TRUE(allowed_forward_read(s.graph, val, rule, s.config.num_hidden_layers))
          << name << " is neither kept nor recomputed";
    }
  }
  EXPECT_LE(died, r.stats.values_dropped);
  if (rule == Rule::none) {
    EXPECT_EQ(died, 0);
  }
  else EXPECT_GT(died, 0);
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, Recompute,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(Rule::none, Rule::layers, Rule::selective, Rule::kinds,
                                                              Rule::drop_everything)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "tied_" : "untied_") +
                                  rule_name(std::get<1>(info.param));
                         });

TEST(Recompute, LayersLowersThePeakAndSelectiveLiesBetween) {
  const auto s = testing::build_llama_step<float>(activation_heavy_config(), 2, 64);
  uint64_t original = analyze_liveness(s.graph, allocator_cost).peak_bytes;
  uint64_t layers = analyze_liveness(recompute(s.graph, RecomputePolicy::layers).graph, allocator_cost).peak_bytes;
  uint64_t selective = analyze_liveness(recompute(s.graph, RecomputePolicy::selective).graph, allocator_cost).peak_bytes;
  std::printf("liveness peak: original %llu, selective %llu, layers %llu bytes\n",
              static_cast<unsigned long long>(original), static_cast<unsigned long long>(selective),
              static_cast<unsigned long long>(layers));
  EXPECT_LT(layers, original);
  EXPECT_LT(selective, original);
  EXPECT_LE(layers, selective);
}

// A kind is a layer value's name without its layer; values every rule
// keeps (outside the layers, or the residual stream crossing them) have none.
TEST(Recompute, KindsNameLayerValuesAcrossLayers) {
  const auto s = testing::build_llama_step<float>(tiny_config(false), 2, 7);
  EXPECT_EQ(recompute_kind(s.graph, s.graph.find("model.layers.0.mlp.swiglu")), "mlp.swiglu");
  EXPECT_EQ(recompute_kind(s.graph, s.graph.find("model.layers.1.mlp.swiglu")), "mlp.swiglu");
  EXPECT_EQ(recompute_kind(s.graph, s.graph.find("model.layers.0.mlp_residual")), "");
  EXPECT_EQ(recompute_kind(s.graph, s.graph.find("model.embed_tokens")), "");
}

TEST(Recompute, PolicyNamesRoundTrip) {
  for (auto p : {RecomputePolicy::none, RecomputePolicy::layers, RecomputePolicy::selective}) {
    EXPECT_EQ(parse_recompute_policy(recompute_policy_name(p)), p);
  }
  try {
    parse_recompute_policy("everything");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown policy 'everything'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spillway::graph
