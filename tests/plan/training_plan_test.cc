// Where the training state goes: the layouts the planner picks as the
// device budget shrinks, what each costs in host memory, and how the
// options move the plan. The step is LLaMA's, the state AdamW's, as the GPU
// engine describes them to the planner.
#include "plan/training_plan.h"

#include <gtest/gtest.h>

#include "base/bytes.h"
#include "base/status.h"
#include "model/llama_config_json.h"
#include "testing/llama.h"
#include "train/step_plan.h"

namespace spillway::plan {
namespace {

// The LLaMA step and AdamW's state (train/step_plan.h) as the planner gets
// them, planned with the layouts that keep the optimizer's state at home
// (--offload on) unless asked otherwise.
struct TrainingPlanRequest {
  model::LlamaConfig config;
  int64_t batch = 1, seq = 1, micro_batches = 1;
  uint64_t device_budget = 0, host_budget = 0;
  bool stream_weights = false;
  bool bf16_moments = false;
  bool fused_projections = false;
  graph::RecomputePolicy recompute = graph::RecomputePolicy::none;
  OffloadMode offload = OffloadMode::on;
  MachineRates rates;
};

struct PlannedLlama : TrainingPlan {
  std::unique_ptr<train::LlamaStep> step;
  TrainingStateSpec state;
  const graph::Graph& graph;
  const model::LlamaGraph& model;
  PlannedLlama(TrainingPlan p, std::unique_ptr<train::LlamaStep> s, TrainingStateSpec spec)
      : TrainingPlan(std::move(p)), step(std::move(s)), state(std::move(spec)), graph(step->step.graph),
        model(step->model) {}
};

std::unique_ptr<train::LlamaStep> training_graph(const TrainingPlanRequest& r) {
  return train::build_llama_step(r.config, r.batch, r.seq, r.fused_projections,
                                 {.backward = true, .recompute = r.recompute}, DType::bf16);
}

std::unique_ptr<PlannedLlama> plan_training(const TrainingPlanRequest& r) {
  auto step = training_graph(r);
  TrainingStateSpec spec = train::adamw_state_spec(*step, r.config, r.bf16_moments);
  plan::TrainingPlanRequest req;
  req.device_budget = r.device_budget;
  req.host_budget = r.host_budget;
  req.micro_batches = r.micro_batches;
  req.offload = r.stream_weights ? OffloadMode::stream : r.offload;
  req.rates = r.rates;
  req.tokens_per_micro_batch = static_cast<double>(r.batch * r.seq);
  req.flops_per_token = model::training_flops_per_token(r.config, r.seq);
  TrainingPlan p = plan::plan_training(step->step.graph, spec, req);
  return std::make_unique<PlannedLlama>(std::move(p), std::move(step), std::move(spec));
}

TrainingPlanRequest request(uint64_t device_budget) {
  TrainingPlanRequest r;
  r.config = testing::llama_config(512, 128, 352, 4, 4, 2);
  r.batch = 2;
  r.seq = 256;
  r.micro_batches = 4;
  r.device_budget = device_budget;
  r.host_budget = 1ull << 30;
  r.rates = h100_rates();
  return r;
}

TEST(TrainingPlan, LayoutsGiveWayAsTheBudgetShrinks) {
  const auto roomy = plan_training(request(1ull << 30));
  EXPECT_TRUE(roomy->weights_resident);
  EXPECT_TRUE(roomy->all_grads_resident());
  EXPECT_EQ(roomy->placement.values_offloaded, 0);
  const uint64_t params = roomy->parameters;
  EXPECT_EQ(params, static_cast<uint64_t>(model::parameter_count(request(0).config)));
  EXPECT_EQ(roomy->host_state_bytes, params * 10);  // the masters' 16-bit remainders and two fp32 moments

  // A little below the whole state with the step: activations go home
  // first, the fastest way to fit. (An eighth of the state and the step,
  // the optimizer's staging buffers aside: they are as large as the state
  // of this small model.)
  const uint64_t all = roomy->resident_bytes + roomy->placement.device_peak;
  const auto snug = plan_training(request(all - (all - roomy->state.staging_bytes) / 8));
  EXPECT_TRUE(snug->all_grads_resident());
  EXPECT_GT(snug->placement.values_offloaded, 0);
  // Too small for weights and gradients together: the gradient sums go home
  // (and accumulate there across the 4 micro-batches).
  const uint64_t budget = roomy->resident_bytes - 1;
  const auto tighter = plan_training(request(budget));
  EXPECT_FALSE(tighter->all_grads_resident());
  EXPECT_EQ(tighter->host_state_bytes,
            params * 10 + (tighter->weights_resident ? 0 : params * 2) + tighter->grad_elements_at_home * 4);
  EXPECT_LE(tighter->resident_bytes + tighter->placement.device_peak, budget);
  EXPECT_GT(tighter->step_seconds, roomy->step_seconds);

  TrainingPlanRequest stream = request(1ull << 30);
  stream.stream_weights = true;
  const auto streamed = plan_training(stream);
  EXPECT_FALSE(streamed->weights_resident);
  EXPECT_FALSE(streamed->all_grads_resident());
  EXPECT_GT(streamed->placement.bytes_loaded, 0u);
}

// Between all gradient sums on the device and none, the vocabulary-sized
// ones (embedding, lm_head) stay alone: every plan's split is that, and
// its host state and optimizer traffic count only the sums at home.
TEST(TrainingPlan, VocabularySizedGradientSumsCanStayAlone) {
  const auto roomy = plan_training(request(1ull << 30));
  const uint64_t all = roomy->resident_bytes + roomy->placement.device_peak;
  const int64_t vocab = request(0).config.vocab_size;
  int mixed = 0;
  for (uint64_t budget = all; budget > all / 8; budget -= all / 32) {
    std::unique_ptr<PlannedLlama> p;
    try {
      p = plan_training(request(budget));
    } catch (const Error&) {
      break;  // below the least that fits
    }
    uint64_t home = 0;
    bool kept_some = false;
    for (size_t i = 0; i < p->grad_resident.size(); ++i) {
      const auto& shape = p->graph.value(p->model.parameters[i]).shape;
      const bool vocab_sized = shape[0] == vocab || shape.last() == vocab;
      if (!p->grad_resident[i]) home += static_cast<uint64_t>(shape.numel());
      if (p->grad_resident[i] && !p->all_grads_resident()) {
        EXPECT_TRUE(vocab_sized) << p->graph.value(p->model.parameters[i]).name;
        kept_some = true;
      }
    }
    EXPECT_EQ(home, p->grad_elements_at_home);
    EXPECT_EQ(p->host_state_bytes, p->parameters * 10 + (p->weights_resident ? 0 : p->parameters * 2) + home * 4);
    EXPECT_DOUBLE_EQ(p->optimizer_seconds,
                     optimizer_seconds(state_bytes(p->graph, p->state), false, p->weights_resident, home * 4, h100_rates()));
    mixed += kept_some;
  }
  EXPECT_GT(mixed, 0) << "no budget kept the vocabulary-sized sums alone";
}

// Stacked projections plan one parameter (one residency, one block) per
// stack; the state the plan accounts for is the same, element for element.
TEST(TrainingPlan, StackedProjectionsArePlannedAsOneParameterEach) {
  for (uint64_t budget : {uint64_t{1} << 30, plan_training(request(1ull << 30))->resident_bytes - 1}) {
    TrainingPlanRequest r = request(budget);
    const auto separate = plan_training(r);
    r.fused_projections = true;
    const auto stacked = plan_training(r);
    const int64_t layers = r.config.num_hidden_layers;
    EXPECT_EQ(stacked->model.parameters.size(), separate->model.parameters.size() - 3 * static_cast<size_t>(layers));
    EXPECT_EQ(stacked->grad_resident.size(), stacked->model.parameters.size());
    EXPECT_EQ(stacked->parameters, separate->parameters);
    // Less what each layout keeps at home (the two may choose differently).
    auto state = [](const TrainingPlan& p) {
      return p.host_state_bytes - p.grad_elements_at_home * 4 - (p.weights_resident ? 0 : p.parameters * 2);
    };
    EXPECT_EQ(state(*stacked), state(*separate));
    uint64_t home = 0;
    for (size_t i = 0; i < stacked->grad_resident.size(); ++i) {
      if (!stacked->grad_resident[i]) home += static_cast<uint64_t>(stacked->graph.value(stacked->model.parameters[i]).shape.numel());
    }
    EXPECT_EQ(home, stacked->grad_elements_at_home);
  }
}

TEST(TrainingPlan, Bf16MomentsHalveTheMomentsAtHomeAndTheOptimizerTraffic) {
  TrainingPlanRequest r = request(1ull << 30);
  const auto fp32 = plan_training(r);
  r.bf16_moments = true;
  const auto bf16 = plan_training(r);
  EXPECT_EQ(fp32->host_state_bytes - bf16->host_state_bytes, fp32->parameters * 4);
  EXPECT_LT(bf16->optimizer_seconds, fp32->optimizer_seconds);
}

TEST(TrainingPlan, RecomputationTradesMemoryForCompute) {
  TrainingPlanRequest r = request(1ull << 30);
  const auto kept = plan_training(r);
  r.recompute = graph::RecomputePolicy::layers;
  const auto remade = plan_training(r);
  EXPECT_LT(remade->placement.device_peak, kept->placement.device_peak);
  EXPECT_GT(remade->micro.compute_seconds, kept->micro.compute_seconds);
  EXPECT_GT(remade->graph.nodes().size(), kept->graph.nodes().size());
}

// In bf16 a matmul that adds its addend rounds once, an add after it twice:
// recomputation must leave every forward fusion in place, or the forward
// pass (and the loss) would change with the policy.
TEST(TrainingPlan, RecomputationKeepsTheForwardFusions) {
  auto fused_forward_matmuls = [](const graph::Graph& g) {
    int n = 0;
    for (const auto& node : g.nodes()) {
      n += node.kind == graph::OpKind::matmul && node.inputs.size() == 3 && !node.backward;
    }
    return n;
  };
  TrainingPlanRequest r = request(1ull << 30);
  const int kept = fused_forward_matmuls(training_graph(r)->step.graph);
  EXPECT_GT(kept, 0);
  for (auto policy : {graph::RecomputePolicy::layers, graph::RecomputePolicy::selective}) {
    r.recompute = policy;
    EXPECT_EQ(fused_forward_matmuls(training_graph(r)->step.graph), kept) << graph::recompute_policy_name(policy);
  }
}

TEST(TrainingPlan, ImpossibleBudgetsNameTheBudget) {
  try {
    plan_training(request(1ull << 20));
    FAIL() << "a 1 MiB device budget was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device-mem"), std::string::npos) << e.what();
  }
  TrainingPlanRequest r = request(1ull << 30);
  r.host_budget = 1 << 20;
  try {
    plan_training(r);
    FAIL() << "a 1 MiB host budget was accepted";
  } catch (const Error& e) {
    // The least any layout needs: the masters' remainders and fp32
    // moments at home, everything else on the device, and the caller's fp32
    // masters (its moments are those at home).
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--host-mem"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at least " + format_bytes(plan_training(request(1ull << 30))->parameters * 14)),
              std::string::npos)
        << msg;
  }
  // The device too small for the only layout the host can hold: both
  // budgets are named, with what the other layouts would need at home.
  const auto roomy = plan_training(request(1ull << 30));
  TrainingPlanRequest both = request(roomy->resident_bytes - 1);
  both.host_budget = roomy->parameters * 14 + 1;
  try {
    plan_training(both);
    FAIL() << "the device budget below the resident state was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.thing(), "--device-mem") << msg;
    EXPECT_NE(msg.find("keep less on the device need at least"), std::string::npos) << msg;
  }
}

// Where everything fits, the whole state stays on the device: nothing at
// home, nothing copied during the step, and an update in place that takes
// far less than streaming the state through the links.
TEST(TrainingPlan, TheWholeStateStaysOnTheDeviceWhereItFits) {
  TrainingPlanRequest r = request(1ull << 30);
  r.offload = OffloadMode::automatic;
  const auto all = plan_training(r);
  EXPECT_TRUE(all->optimizer_resident);
  EXPECT_TRUE(all->all_on_device());
  EXPECT_EQ(all->host_state_bytes, 0u);
  EXPECT_EQ(all->placement.bytes_loaded, 0u);
  EXPECT_NE(all->layout().find("the whole training state on the device"), std::string::npos) << all->layout();
  const auto streamed = plan_training(request(1ull << 30));
  EXPECT_FALSE(streamed->optimizer_resident);
  EXPECT_LT(all->optimizer_seconds, streamed->optimizer_seconds / 4);
  EXPECT_LT(all->step_seconds, streamed->step_seconds);
  // The optimizer's state on the device costs its bytes there.
  const StateBytes bytes = state_bytes(all->graph, all->state);
  EXPECT_EQ(bytes.master + bytes.optimizer, all->parameters * 10);
  EXPECT_GE(all->resident_bytes, streamed->resident_bytes - all->state.staging_bytes + bytes.master + bytes.optimizer);

  // Below what the whole state needs, auto moves it home; off refuses.
  TrainingPlanRequest tight = request(streamed->resident_bytes + streamed->placement.device_peak);
  tight.offload = OffloadMode::automatic;
  EXPECT_FALSE(plan_training(tight)->optimizer_resident);
  tight.offload = OffloadMode::off;
  try {
    plan_training(tight);
    FAIL() << "--offload off planned a state that does not fit";
  } catch (const Error& e) {
    EXPECT_EQ(e.thing(), "--device-mem") << e.what();
  }
}

// --offload off also refuses a plan whose activations would go home.
TEST(TrainingPlan, OffloadOffCopiesNothing) {
  TrainingPlanRequest r = request(1ull << 30);
  r.offload = OffloadMode::off;
  const auto roomy = plan_training(r);
  EXPECT_TRUE(roomy->all_on_device());
  r.device_budget = roomy->resident_bytes + roomy->placement.device_peak * 3 / 4;
  try {
    plan_training(r);
    FAIL() << "--offload off planned a step that offloads activations";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing offloaded"), std::string::npos) << e.what();
  }
}

TEST(TrainingPlan, OffloadModesHaveNames) {
  for (OffloadMode m : {OffloadMode::automatic, OffloadMode::on, OffloadMode::off, OffloadMode::stream}) {
    EXPECT_EQ(parse_offload_mode(offload_mode_name(m)), m);
  }
  EXPECT_THROW(parse_offload_mode("maybe"), Error);
}

TEST(MachineRates, TheGpuNameChoosesTheRates) {
  EXPECT_EQ(rates_for_gpu("cuda:0 NVIDIA H200").memory_bytes, h200_rates().memory_bytes);
  EXPECT_GT(h200_rates().memory_bytes, h100_rates().memory_bytes);
  EXPECT_EQ(rates_for_gpu("cuda:0 NVIDIA H100 80GB HBM3").name, h100_rates().name);
  EXPECT_EQ(h200_rates().peak_flops, h100_rates().peak_flops);
}

}  // namespace
}  // namespace spillway::plan
