#include "train/pipeline_plan.h"

#include "plan/machine_rates.h"

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

PlannedPipeline plan_pipeline_step(StepPlanRequest r, StateSharding shard, int stages, int chunks) {
  SPW_CHECK(stages >= 1, "--pp", "needs at least one stage, not ", stages);
  SPW_CHECK(chunks >= 1, "--virtual-stages", "needs at least one stage a rank, not ", chunks);
  PlannedPipeline out;
  PipelinePricing& p = out.pricing;
  p.chunks = chunks;
  // The cuts the engines make: proportions of the cost model's times, which
  // any GPU's rates split alike, taken at the H100's so that every rank and
  // the plan cut the same layers.
  auto costs = [&] { return model::llama_step_costs(r.config, r.batch, r.seq, plan::h100_rates()); };
  const std::string key = std::to_string(r.config.num_hidden_layers) + "," + std::to_string(r.batch) + "," +
                          std::to_string(r.seq);
  const int total = stages * chunks;
  p.stages = model::balance_llama_stages(r.cache ? r.cache->costs(key, costs) : costs(), total);
  p.micro_batches = r.micro_batches;
  // 1F1B: stage k keeps the inputs of min(S - k, m) micro-batches, the
  // first stage token ids alone. Every later stage is charged stage 1's
  // count, so that stages alike in layers plan once. Interleaved, rank 0
  // runs (S - 1) * 2 + (V - 1) * S passes ahead, its inputs shared by its
  // V stages.
  const int64_t ahead = chunks == 1 ? stages - 1 : (stages - 1) * 2 + (chunks - 1) * int64_t{stages};
  p.kept_inputs = (std::min<int64_t>(ahead, r.micro_batches * chunks) + chunks - 1) / chunks;
  // A rank's share of each token's FLOPs: its V stages' together, which
  // the step it runs them in (below) is priced over.
  r.pipeline_stages = stages;
  // A rank's V stages share its device.
  r.device_budget /= static_cast<uint64_t>(chunks);
  const auto reserved = r.device_reserved;
  // Stages of the same layer count, ends and kept inputs have the same plan.
  struct Stage {
    PlannedStep plan;
    double slot = 0, forward = 0;
    uint64_t bytes = 0;
  };
  std::map<std::tuple<int64_t, bool, bool>, Stage> planned;
  std::vector<const Stage*> of_stage;
  for (int k = 0; k < total; ++k) {
    const model::LlamaStage& stage = p.stages[static_cast<size_t>(k)];
    const int64_t last = stage.last_layer < 0 ? r.config.num_hidden_layers : stage.last_layer;
    const auto key = std::make_tuple(last - stage.first_layer, stage.has_embedding(), k == total - 1);
    auto it = planned.find(key);
    if (it == planned.end()) {
      StepPlanRequest s = r;
      s.stage = stage;
      const int64_t kept = k == 0 ? 0 : p.kept_inputs;
      s.device_reserved = [reserved, kept](const LlamaStep& step) {
        return (reserved ? reserved(step) : 0) + static_cast<uint64_t>(kept) * hidden_bytes(step);
      };
      Stage st{.plan = plan_data_parallel_step(s, shard)};
      const plan::TrainingPlan& q = st.plan.plan;
      st.bytes = q.resident_bytes + q.placement.device_peak + s.device_reserved(*st.plan.step);
      // The last stage runs no forward pass ahead: its training step makes
      // the loss from the kept input (train/pipeline_walk.h).
      st.forward = k == total - 1 ? 0 : forward_seconds(s, *st.plan.step);
      st.slot = st.forward + q.micro.step_seconds;
      p.hidden_bytes = std::max(p.hidden_bytes, hidden_bytes(*st.plan.step));
      it = planned.emplace(key, std::move(st)).first;
    }
    of_stage.push_back(&it->second);
  }
  // Each pass hands a hidden state on and a gradient back, each a send and
  // a receive at once (Communicator::exchange), neither under compute.
  const double link = r.stage_link_bytes > 0 ? r.stage_link_bytes : r.rates.collective_bytes;
  p.transfer_seconds = stages > 1 ? 2.0 * chunks * static_cast<double>(p.hidden_bytes) / link : 0.0;
  // The slowest rank's micro-batch through its stages, and the rank
  // needing the most memory.
  double slowest = -1;
  for (int rank = 0; rank < stages; ++rank) {
    double work = 0;
    uint64_t bytes = 0;
    for (int c = 0; c < chunks; ++c) {
      const Stage& st = *of_stage[static_cast<size_t>(c * stages + rank)];
      work += st.slot;
      bytes += st.bytes;
    }
    if (bytes > p.largest_bytes) {
      p.largest_bytes = bytes;
      p.largest = rank;
    }
    if (work > slowest) {
      slowest = work;
      p.slowest = rank;
    }
  }
  p.slot_seconds = slowest + p.transfer_seconds;
  p.forward_seconds = 0;
  for (int c = 0; c < chunks; ++c) p.forward_seconds += of_stage[static_cast<size_t>(c * stages + p.slowest)]->forward;
  const auto m = static_cast<double>(r.micro_batches);
  p.bubble = (stages - 1.0) / (m * chunks + stages - 1.0);
  // The slowest rank's gradient sums' exchange and optimizer, as its
  // stages' plans price them; their micro-batches replaced by the
  // pipeline's: m of the rank's slots and the bubble's (S - 1) / V.
  double beside = 0, communication = 0, optimizer = 0;
  const Stage* first = of_stage[static_cast<size_t>(p.slowest)];
  for (int c = 0; c < chunks; ++c) {
    const plan::TrainingPlan& q = of_stage[static_cast<size_t>(c * stages + p.slowest)]->plan.plan;
    beside += q.step_seconds - m * q.micro.step_seconds;
    communication += q.communication_seconds;
    optimizer += q.optimizer_seconds;
  }
  for (auto& [key, st] : planned) {
    if (&st == first) out.step = std::move(st.plan);
  }
  plan::TrainingPlan& q = out.step.plan;
  const double before = q.step_seconds;
  q.step_seconds = beside + (m + (stages - 1.0) / chunks) * p.slot_seconds;
  q.communication_seconds = communication;
  q.optimizer_seconds = optimizer;
  q.tokens_per_second *= before / q.step_seconds;
  q.mfu *= before / q.step_seconds;
  return out;
}

}  // namespace spillway::train
