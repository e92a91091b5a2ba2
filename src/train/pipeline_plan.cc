#include "train/pipeline_plan.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "base/status.h"
#include "model/llama_stages.h"
#include "plan/cost_model.h"

namespace spillway::train {

namespace {

// The forward pass a stage runs ahead of its backward: its graph's nodes,
// every value on the device (it keeps only what it hands on).
double forward_seconds(const StepPlanRequest& r, const LlamaStep& planned) {
  const auto forward =
      llama_step_of(r, planned.fused_projections, {.backward = false, .recompute = graph::RecomputePolicy::none});
  const graph::Graph& g = forward->step.graph;
  double seconds = 0;
  for (const graph::Node& n : g.nodes()) seconds += plan::node_cost(g, n, r.rates).seconds;
  return seconds;
}

// The hidden state a stage hands on (or, the last, reads): the rank's part.
uint64_t hidden_bytes(const LlamaStep& s) {
  const graph::Value v = s.model.hidden_out.valid() ? s.model.hidden_out : s.model.hidden_in;
  return v.valid() ? s.step.graph.value(v).bytes() : 0;
}

}  // namespace

PlannedPipeline plan_pipeline_step(StepPlanRequest r, StateSharding shard, int stages) {
  SPW_CHECK(stages >= 1, "--pp", "needs at least one stage, not ", stages);
  PlannedPipeline out;
  PipelinePricing& p = out.pricing;
  // The cuts the CPU engine makes: proportions of the cost model's times.
  auto costs = [&] { return model::llama_step_costs(r.config, r.batch, r.seq, r.rates); };
  const std::string key = std::to_string(r.config.num_hidden_layers) + "," + std::to_string(r.batch) + "," +
                          std::to_string(r.seq);
  p.stages = model::balance_llama_stages(r.cache ? r.cache->costs(key, costs) : costs(), stages);
  p.micro_batches = r.micro_batches;
  // 1F1B: stage k keeps the inputs of min(S - k, m) micro-batches, the
  // first stage token ids alone. Every later stage is charged stage 1's
  // count, so that stages alike in layers plan once.
  p.kept_inputs = std::min<int64_t>(stages - 1, r.micro_batches);
  r.pipeline_stages = stages;
  const auto reserved = r.device_reserved;
  // Stages of the same layer count, ends and kept inputs have the same plan.
  std::map<std::tuple<int64_t, bool, bool>, std::pair<int, PlannedStep>> planned;
  double slowest = -1;
  for (int k = 0; k < stages; ++k) {
    const model::LlamaStage& stage = p.stages[static_cast<size_t>(k)];
    const int64_t last = stage.last_layer < 0 ? r.config.num_hidden_layers : stage.last_layer;
    const auto key = std::make_tuple(last - stage.first_layer, stage.has_embedding(), k == stages - 1);
    if (planned.count(key)) continue;
    StepPlanRequest s = r;
    s.stage = stage;
    const int64_t kept = k == 0 ? 0 : p.kept_inputs;
    s.device_reserved = [reserved, kept](const LlamaStep& step) {
      return (reserved ? reserved(step) : 0) + static_cast<uint64_t>(kept) * hidden_bytes(step);
    };
    PlannedStep plan = plan_data_parallel_step(s, shard);
    const plan::TrainingPlan& q = plan.plan;
    const uint64_t bytes = q.resident_bytes + q.placement.device_peak + s.device_reserved(*plan.step);
    if (bytes > p.largest_bytes) {
      p.largest_bytes = bytes;
      p.largest = k;
    }
    const double forward = forward_seconds(s, *plan.step);
    const double slot = forward + q.micro.step_seconds;
    if (slot > slowest) {
      slowest = slot;
      p.slowest = k;
      p.forward_seconds = forward;
      p.hidden_bytes = hidden_bytes(*plan.step);
    }
    planned.emplace(key, std::make_pair(k, std::move(plan)));
  }
  for (auto& [key, entry] : planned) {
    if (entry.first == p.slowest) out.step = std::move(entry.second);
  }
  // Each slot hands a hidden state on and a gradient back, each a send and
  // a receive at once (Communicator::exchange), neither under compute.
  const double link = r.stage_link_bytes > 0 ? r.stage_link_bytes : r.rates.collective_bytes;
  p.transfer_seconds = stages > 1 ? 2.0 * static_cast<double>(p.hidden_bytes) / link : 0.0;
  p.slot_seconds = slowest + p.transfer_seconds;
  const auto m = static_cast<double>(r.micro_batches);
  p.bubble = (stages - 1.0) / (m + stages - 1.0);
  // The gradient sums' exchange and the optimizer as the stage's plan
  // prices them; its micro-batches replaced by the pipeline's slots.
  plan::TrainingPlan& q = out.step.plan;
  const double before = q.step_seconds;
  q.step_seconds = before - m * q.micro.step_seconds + (m + stages - 1.0) * p.slot_seconds;
  q.tokens_per_second *= before / q.step_seconds;
  q.mfu *= before / q.step_seconds;
  return out;
}

}  // namespace spillway::train
