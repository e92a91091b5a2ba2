// Recomputation chosen kind by kind: the kinds of layer values ranked by the
// time remaking them costs per byte they free, and the planner keeping the
// attention's output at long sequences, where remaking it would run the
// quadratic attention twice, while `layers` remakes everything.
#include "train/recompute_choice.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "model/llama_config_json.h"
#include "plan/machine_rates.h"
#include "train/step_plan.h"

namespace spillway::train {
namespace {

std::vector<std::string> kinds_of(const std::vector<RecomputeKindCost>& ranked) {
  std::vector<std::string> kinds;
  for (const RecomputeKindCost& k : ranked) kinds.push_back(k.kind);
  return kinds;
}

size_t rank_of(const std::vector<std::string>& kinds, const std::string& kind) {
  return static_cast<size_t>(std::find(kinds.begin(), kinds.end(), kind) - kinds.begin());
}

TEST(RecomputeChoice, ElementwiseValuesComeFirstAndTheAttentionLast) {
  const auto config = model::resolve_config("llama3-8b");
  const auto layers = build_llama_step(config, 1, 65536, false,
                                       {.backward = true, .recompute = graph::RecomputePolicy::layers}, DType::bf16);
  const std::vector<RecomputeKindCost> ranked = recompute_kinds_by_cost(layers->step.graph, plan::rates_for_gpu("H100"));
  const std::vector<std::string> kinds = kinds_of(ranked);
  for (const char* kind : {"self_attn.q_rope", "input_layernorm", "mlp.swiglu", "self_attn.q_proj", "mlp.gate_proj",
                           "self_attn.attention"}) {
    ASSERT_LT(rank_of(kinds, kind), kinds.size()) << kind << " is not among the kinds `layers` remakes";
  }
  EXPECT_LT(rank_of(kinds, "self_attn.q_rope"), rank_of(kinds, "self_attn.q_proj"));
  EXPECT_LT(rank_of(kinds, "mlp.swiglu"), rank_of(kinds, "mlp.gate_proj"));
  EXPECT_LT(rank_of(kinds, "mlp.gate_proj"), rank_of(kinds, "self_attn.attention"));
  for (size_t i = 1; i < ranked.size(); ++i) {
    EXPECT_LE(ranked[i - 1].seconds / static_cast<double>(ranked[i - 1].bytes),
              ranked[i].seconds / static_cast<double>(ranked[i].bytes))
        << ranked[i].kind;
  }
  // Each kind once per layer: q's output is seq x hidden bf16 in each of 32 layers.
  EXPECT_EQ(ranked[rank_of(kinds, "self_attn.q_proj")].bytes, 32ull * 65536 * 4096 * 2);
}

// LLaMA-3-8B at 64k tokens on an H100 with 110 GiB of host memory: the
// planner remakes the cheap kinds and keeps (or offloads) the attention's
// outputs (its output and log-sum-exp, one kind), and predicts a faster
// step than `layers`.
TEST(RecomputeChoice, AtLongSequencesThePlanKeepsTheAttentionAndBeatsLayers) {
  StepPlanRequest r;
  r.config = model::resolve_config("llama3-8b");
  r.batch = 1;
  r.seq = 65536;
  r.micro_batches = 4;
  r.bf16_moments = true;
  r.device_budget = 76ull << 30;
  r.host_budget = 110ull << 30;
  r.host_reserved = 4ull << 30;
  r.rates = plan::rates_for_gpu("H100");
  r.recompute = graph::RecomputePolicy::layers;
  const PlannedStep layers = plan_llama_step(r);
  r.recompute.reset();
  const PlannedStep chosen = plan_llama_step(r);
  const std::vector<std::string>& kinds = chosen.step->recomputed_kinds;
  ASSERT_FALSE(kinds.empty()) << recompute_summary(*chosen.step);
  EXPECT_EQ(rank_of(kinds, "self_attn.attention"), kinds.size());
  EXPECT_LT(chosen.plan.step_seconds, 0.95 * layers.plan.step_seconds);
  EXPECT_EQ(recompute_summary(*chosen.step).find(std::to_string(kinds.size()) + " kinds of layer values ("), 0u);
}

}  // namespace
}  // namespace spillway::train
