// LLaMA cut into pipeline stages (model::LlamaStage, model/llama_stages.h):
// the stages run one after another as a pipeline runs a micro-batch — each
// forward hands its hidden state on; then from the last stage back, each
// remakes its forward and runs its backward from the gradient the next
// stage handed back — and give one device's loss and every parameter's
// gradient in float64 (to 1e-12: only the order of a few sums differs); the
// split the cost model balances is the best contiguous one.
#include "model/llama_stages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "model/llama_config_json.h"
#include "testing/llama.h"
#include "testing/numeric.h"

namespace spillway::model {
namespace {

constexpr int64_t kBatch = 2, kSeq = 8;

LlamaConfig untied() { return testing::llama_config(37, 16, 24, 4, 4, 2); }

std::vector<int32_t> ids(uint64_t seed) { return testing::random_tokens(kBatch * kSeq, seed, 37); }

// Checkpoint tensor t's weights, the same for every stage holding it.
std::vector<double> weights(const graph::ValueInfo& p, int t) {
  return testing::random_vector<double>(p.shape.numel(), 100 + static_cast<uint64_t>(t), -0.5, 0.5);
}

struct Result {
  double loss = 0;
  std::vector<std::vector<double>> grads;  // by checkpoint tensor
};

// A stage's program: its graph, the values bound, and its run.
class StageRun {
 public:
  // Forward only (handing the hidden state on), or forward and backward
  // from `seed` (the last stage: from its loss).
  StageRun(const LlamaConfig& c, const LlamaStage& stage, bool backward) : b_(g_, DType::f64) {
    m_ = build_llama(b_, c, kBatch, kSeq, {.stage = stage});
    if (m_.loss.valid()) g_.mark_output(m_.loss);
    if (m_.hidden_out.valid()) g_.mark_output(m_.hidden_out);
    if (!backward) return;
    std::vector<graph::Value> wrt = m_.parameters;
    if (m_.hidden_in.valid()) wrt.push_back(m_.hidden_in);
    if (m_.loss.valid()) {
      grads_ = graph::append_backward(b_, m_.loss, wrt);
    } else {
      seed_ = b_.input("hidden_out.grad", g_.value(m_.hidden_out).shape, DType::f64);
      grads_ = graph::append_backward_from(b_, m_.hidden_out, seed_, wrt);
    }
  }

  // Runs on `hidden_in` (none for the first stage) and `hidden_grad` (the
  // gradient of its hidden state, none for the last): returns the hidden
  // state it hands on (forward only) or the gradient of the one it read.
  std::vector<double> run(std::vector<double> hidden_in, std::vector<double> hidden_grad, Result& r) {
    auto space = make_host_heap_space("test", MemorySpace::kUnlimited);
    exec::CpuExecutor e(g_, *space);
    std::vector<int32_t> tokens = ids(1), targets = ids(2);
    if (m_.tokens.valid()) e.bind(m_.tokens, std::span<int32_t>(tokens));
    if (m_.targets.valid()) e.bind(m_.targets, std::span<int32_t>(targets));
    if (m_.hidden_in.valid()) e.bind(m_.hidden_in, std::span<double>(hidden_in));
    if (seed_.valid()) e.bind(seed_, std::span<double>(hidden_grad));
    std::vector<std::vector<double>> w;
    for (size_t i = 0; i < m_.parameters.size(); ++i) {
      w.push_back(weights(g_.value(m_.parameters[i]), m_.parameter_parts[i].front()));
    }
    for (size_t i = 0; i < m_.parameters.size(); ++i) e.bind(m_.parameters[i], std::span<double>(w[i]));
    e.run();
    if (m_.loss.valid()) r.loss = e.read<double>(m_.loss)[0];
    if (grads_.of.empty()) {
      auto h = e.read<double>(m_.hidden_out);
      return {h.begin(), h.end()};
    }
    for (size_t i = 0; i < m_.parameters.size(); ++i) {
      auto d = e.read<double>(grads_[m_.parameters[i]]);
      r.grads.at(static_cast<size_t>(m_.parameter_parts[i].front())).assign(d.begin(), d.end());
    }
    if (!m_.hidden_in.valid()) return {};
    auto d = e.read<double>(grads_[m_.hidden_in]);
    return {d.begin(), d.end()};
  }

 private:
  graph::Graph g_;
  graph::Builder b_;
  LlamaGraph m_;
  graph::Gradients grads_;
  graph::Value seed_;
};

Result pipelined(const LlamaConfig& c, const std::vector<LlamaStage>& stages) {
  Result r;
  r.grads.resize(parameter_specs(c).size());
  std::vector<std::vector<double>> inputs(stages.size());
  for (size_t k = 0; k + 1 < stages.size(); ++k) {
    inputs[k + 1] = StageRun(c, stages[k], false).run(inputs[k], {}, r);
  }
  std::vector<double> grad;
  for (size_t k = stages.size(); k-- > 0;) grad = StageRun(c, stages[k], true).run(inputs[k], grad, r);
  return r;
}

void expect_same(const Result& got, const Result& want) {
  EXPECT_NEAR(got.loss, want.loss, 1e-12 * want.loss);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t t = 0; t < want.grads.size(); ++t) {
    ASSERT_EQ(got.grads[t].size(), want.grads[t].size()) << "tensor " << t;
    double err = 0, scale = 1e-30;
    for (size_t j = 0; j < want.grads[t].size(); ++j) {
      err = std::max(err, std::abs(got.grads[t][j] - want.grads[t][j]));
      scale = std::max(scale, std::abs(want.grads[t][j]));
    }
    EXPECT_LT(err / scale, 1e-12) << "tensor " << t;
  }
}

TEST(LlamaStages, StagesRunInTurnGiveOneDevicesLossAndGradients) {
  const LlamaConfig c = untied();
  const Result whole = pipelined(c, {LlamaStage{0, 4}});
  expect_same(pipelined(c, {LlamaStage{0, 2}, LlamaStage{2, 4}}), whole);
  expect_same(pipelined(c, {LlamaStage{0, 1}, LlamaStage{1, 3}, LlamaStage{3, 4}}), whole);
}

// The split against every contiguous split of a small model: none has a
// faster slowest stage.
TEST(LlamaStages, TheBalancedSplitIsTheBestContiguousOne) {
  LlamaStepCosts costs;
  costs.layers = {1.0, 1.2, 0.9, 1.1, 1.0, 1.3, 0.8};
  costs.embedding = 0.4;
  costs.head = 2.5;
  const std::vector<LlamaStage> split = balance_llama_stages(costs, 3);
  ASSERT_EQ(split.size(), 3u);
  EXPECT_EQ(split.front().first_layer, 0);
  EXPECT_EQ(split.back().last_layer, 7);
  double slowest = 0;
  for (const LlamaStage& s : split) slowest = std::max(slowest, stage_seconds(costs, s));
  for (int64_t a = 1; a < 7; ++a) {
    for (int64_t b = a + 1; b < 7; ++b) {
      const double other = std::max({stage_seconds(costs, {0, a}), stage_seconds(costs, {a, b}),
                                      stage_seconds(costs, {b, 7})});
      EXPECT_LE(slowest, other + 1e-12) << "split at " << a << ", " << b;
    }
  }
}

// LLaMA-3.2-1B in four stages: lm_head over 128k words costs more than a
// layer, so the last stage takes fewer layers than the middle ones.
TEST(LlamaStages, TheLastStageOfTheOneBillionModelTakesFewerLayers) {
  const LlamaStepCosts costs = llama_step_costs(resolve_config("llama3.2-1b"), 1, 4096, plan::h100_rates());
  EXPECT_GT(costs.head, costs.layers[0]);
  const std::vector<LlamaStage> split = balance_llama_stages(costs, 4);
  ASSERT_EQ(split.size(), 4u);
  const auto layers = [](const LlamaStage& s) { return s.last_layer - s.first_layer; };
  EXPECT_LT(layers(split[3]), layers(split[1]));
  double slowest = 0;
  for (const LlamaStage& s : split) slowest = std::max(slowest, stage_seconds(costs, s));
  EXPECT_LE(slowest, stage_seconds(costs, {12, 16}));  // the even split's last stage
}

// Every stage but the last runs its forward pass once more ahead of its
// step: LLaMA-3-8B's two stages are cut where the first's step and forward
// take what the last's step, lm_head's included, takes, which gives the
// first fewer layers than half; no other cut has a faster slowest slot.
TEST(LlamaStages, StagesThatRunTheirForwardAheadTakeFewerLayers) {
  const LlamaStepCosts costs = llama_step_costs(resolve_config("llama3-8b"), 1, 8192, plan::h100_rates());
  ASSERT_EQ(costs.forward_layers.size(), costs.layers.size());
  EXPECT_GT(costs.forward_layers[0], 0.25 * costs.layers[0]);
  EXPECT_LT(costs.forward_layers[0], 0.45 * costs.layers[0]);
  EXPECT_GT(costs.forward_embedding, 0);
  const std::vector<LlamaStage> split = balance_llama_stages(costs, 2);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_LT(split[0].last_layer, 16);
  const double slowest =
      std::max(stage_slot_seconds(costs, split[0], false), stage_slot_seconds(costs, split[1], true));
  for (int64_t a = 1; a < 32; ++a) {
    const double other =
        std::max(stage_slot_seconds(costs, {0, a}, false), stage_slot_seconds(costs, {a, 32}, true));
    EXPECT_LE(slowest, other + 1e-12) << "split at " << a;
  }
}

// A tied table: the first stage's embedding and the last stage's copy as
// lm_head, whose gradients together are the one table's.
TEST(LlamaStages, ATiedTableSplitBetweenStagesHasBothGradients) {
  const LlamaConfig c = testing::llama_config(37, 16, 24, 4, 4, 2, /*tied=*/true);
  const Result whole = pipelined(c, {LlamaStage{0, 4}});
  Result first = pipelined(c, {LlamaStage{0, 2}, LlamaStage{2, 4}});
  // pipelined() keeps each tensor's last writer: the first stage's (its
  // embedding part); the last stage's lm_head part is recomputed here.
  Result last_part;
  last_part.grads.resize(whole.grads.size());
  std::vector<double> in = StageRun(c, {0, 2}, false).run({}, {}, last_part);
  StageRun(c, {2, 4}, true).run(in, {}, last_part);
  for (size_t j = 0; j < first.grads[0].size(); ++j) first.grads[0][j] += last_part.grads[0][j];
  expect_same(first, whole);
}

// Where a tensor lies, derived from the layer ranges, is where each
// stage's graph names it (a tied table: with the first stage).
TEST(LlamaStages, EachTensorsStageIsTheStageWhoseGraphHoldsIt) {
  for (bool tied : {false, true}) {
    const LlamaConfig c = testing::llama_config(37, 16, 24, 4, 4, 2, tied);
    const std::vector<LlamaStage> stages{{0, 1}, {1, 3}, {3, 4}};
    std::vector<int> holder(parameter_specs(c).size(), -1);
    for (size_t s = 0; s < stages.size(); ++s) {
      graph::Graph g;
      graph::Builder b(g, DType::f64);
      for (const auto& parts : build_llama(b, c, 1, 4, {.stage = stages[s]}).parameter_parts) {
        if (holder[static_cast<size_t>(parts.front())] < 0) holder[static_cast<size_t>(parts.front())] = static_cast<int>(s);
      }
    }
    for (size_t t = 0; t < holder.size(); ++t) {
      EXPECT_EQ(llama_stage_of_tensor(c, stages, static_cast<int>(t)), holder[t]) << "tensor " << t << " tied " << tied;
    }
  }
}

TEST(LlamaStages, SplitsThatCannotBeAreRefusedNamingWhy) {
  LlamaStepCosts costs;
  costs.layers = {1.0, 1.0};
  try {
    balance_llama_stages(costs, 3);
    FAIL() << "three stages of two layers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 pipeline stages need at least as many layers"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace spillway::model
