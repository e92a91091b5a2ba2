#include "train/step_plan.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "base/status.h"
#include "device/communicator.h"
#include "model/llama_config_json.h"
#include "model/llama_sharding.h"
#include "model/llama_weights.h"
#include "train/adamw_state.h"
#include "train/recompute_choice.h"
#include "train/ring_schedule.h"
#include "train/shard_layout.h"

namespace spillway::train {

namespace {

// Every layer's tensors are alike: one layer's model has the largest
// (listing every layer's costs more than the rest of a plan, which a
// search over layouts makes many of).
int64_t largest_tensor(model::LlamaConfig config) {
  config.num_hidden_layers = 1;
  int64_t largest = 1;
  for (const auto& spec : model::parameter_specs(config)) largest = std::max(largest, spec.shape.numel());
  return largest;
}

// What sharded gradient sums (and weights) need on the device beside their
// shares: the engine's rings (train/cuda/shard_rings.h), laid out as the
// engine lays out the state, and a checkpoint read's scratch.
void add_rings(const LlamaStep& step, const model::LlamaConfig& config, int ranks, bool weights,
               plan::TrainingStateSpec& spec) {
  const auto specs = model::parameter_specs(config);
  std::vector<int64_t> numel;
  std::vector<bool> decayed_tensor;
  for (const auto& t : specs) {
    numel.push_back(t.shape.numel());
    decayed_tensor.push_back(t.shape.rank() >= 2);
  }
  const graph::Graph& g = step.step.graph;
  std::vector<graph::Value> grads;
  for (graph::Value p : step.model.parameters) grads.push_back(step.step.grads[p]);
  const StateLayout layout = lay_out_state(step.model.parameter_parts, numel, decayed_tensor,
                                           llama_region_keys(step, config), ranks, 0, kStateAlign);
  spec.shard_gradients = true;
  spec.shard_weights = weights;
  spec.ring_bytes = reduce_schedule(g, ring_regions(layout, grads, 4)).bytes() +
                    static_cast<uint64_t>(OptimizerStaging(largest_tensor(config)).chunk) * 4;
  if (weights) spec.ring_bytes += gather_schedule(g, ring_regions(layout, step.model.parameters, 2)).bytes();
  uint64_t largest = 0;
  for (const auto& r : layout.shards.regions()) largest = std::max(largest, r.elements);
  spec.ring_tail_bytes = static_cast<uint64_t>(
      ring_bytes_sent(Collective::reduce_scatter, static_cast<double>(largest) * (weights ? 6 : 4), ranks));
}

}  // namespace

std::vector<int> llama_region_keys(const LlamaStep& step, const model::LlamaConfig& config) {
  const auto specs = model::parameter_specs(config);
  std::vector<std::string> names;
  std::vector<bool> decayed;
  for (size_t j = 0; j < step.model.parameters.size(); ++j) {
    names.push_back(step.step.graph.value(step.model.parameters[j]).name);
    decayed.push_back(specs[static_cast<size_t>(step.model.parameter_parts[j].front())].shape.rank() >= 2);
  }
  return layer_region_keys(names, decayed);
}

StateSharding sharding_level(const plan::TrainingStateSpec& state) {
  return state.state_shards <= 1 ? StateSharding::none
         : state.shard_weights   ? StateSharding::weights
         : state.shard_gradients ? StateSharding::gradients
                                 : StateSharding::optimizer;
}

// The vocabulary-sized gradient sums (embedding, lm_head) are the ones to keep
// on the device first: each micro-batch would move them whole, the
// embedding's for the few rows it touches and lm_head's at the loss, where
// memory is scarcest.
plan::TrainingStateSpec adamw_state_spec(const LlamaStep& s, const model::LlamaConfig& config, bool bf16_moments,
                                         bool caller_moments) {
  plan::TrainingStateSpec spec;
  const graph::Graph& g = s.step.graph;
  for (graph::Value w : s.model.parameters) {
    const Shape& shape = g.value(w).shape;
    const bool vocab_sized = shape.rank() == 2 && (shape[0] == config.vocab_size || shape[1] == config.vocab_size);
    spec.parameters.push_back({w, s.step.grads[w], vocab_sized});
  }
  spec.kept_first_label = "the vocabulary-sized ones";
  // A pipeline stage reads a hidden state (and its gradient) where the
  // first and last stages read tokens and targets.
  for (graph::Value v : {s.model.tokens, s.model.targets, s.model.loss_weights, s.model.hidden_in, s.hidden_out_grad}) {
    if (v.valid()) spec.inputs.push_back(v);
  }
  spec.master_bytes = kMasterRestBytes;
  spec.optimizer_bytes = adamw_moment_bytes(bf16_moments);
  spec.staging_bytes = OptimizerStaging(largest_tensor(config)).device_bytes();
  // The trainer's fp32 masters (at start-up, until the state has split them,
  // and at the end), and the fp32 moments a resumed run reads.
  spec.caller_master_bytes = sizeof(float);
  spec.caller_optimizer_bytes = caller_moments ? adamw_moment_bytes(false) : 0;
  return spec;
}

std::unique_ptr<LlamaStep> build_llama_step(const model::LlamaConfig& config, int64_t batch, int64_t seq,
                                            bool fused_projections, const graph::StepRecipe& recipe, DType dtype,
                                            bool weighted_loss, bool documents, const graph::TensorParallelism& tp,
                                            const model::LlamaStage& stage, const model::LlamaContext& context,
                                            const model::LoraConfig* lora) {
  auto s = std::make_unique<LlamaStep>();
  graph::Graph g;
  graph::Builder b(g, dtype);
  s->model = model::build_llama(b, config, batch, seq,
                                {.fused_projections = fused_projections, .weighted_loss = weighted_loss,
                                 .documents = documents, .lora = lora, .adapter_dropout = recipe.backward,
                                 .stage = stage, .context = context});
  // A stage short of the loss hands its hidden state on and starts its
  // backward from the gradient handed back.
  const bool hands_on = !s->model.loss.valid();
  const graph::Value end = hands_on ? s->model.hidden_out : s->model.loss;
  graph::StepRecipe split = recipe;
  graph::Builder* sb = &b;
  std::optional<graph::RankGraph> rank;
  std::optional<graph::Builder> rb;
  if (tp.ranks > 1) {
    g.mark_output(end);
    rank = model::shard_llama(g, s->model, config, dtype, tp);
    sb = &rb.emplace(rank->graph, dtype);
    split.seed = graph::seed_gradient(tp);
  }
  // Every context rank's chunk loss is seeded as a data-parallel rank's
  // loss is: the GPU engine takes the mean over dp x cp ranks
  // (EngineOptions::replicas), the objective the mean of the chunks' means.
  std::vector<graph::Value> wrt = s->model.trainable();
  if (s->model.hidden_in.valid() && recipe.backward) wrt.push_back(s->model.hidden_in);
  if (hands_on) {
    const graph::Value out = s->model.hidden_out;  // renamed into the rank's graph
    if (recipe.backward) {
      s->hidden_out_grad = sb->input("hidden_out.grad", sb->graph().value(out).shape, dtype);
    }
    s->step = graph::make_step_graph_from(*sb, out, s->hidden_out_grad, wrt, split);
  } else {
    s->step = graph::make_step_graph(*sb, s->model.loss, wrt, split);
  }
  s->fused_projections = fused_projections;
  s->recompute = recipe.recompute;
  s->recomputed_kinds = recipe.recomputed_kinds;
  s->loss_chunk_rows = recipe.loss_chunk_rows;
  return s;
}

int64_t head_chunk_rows(const StepPlanRequest& r) {
  if (r.loss_chunk_rows) return *r.loss_chunk_rows;
  if (r.tensor_parallel.ranks > 1) return 0;
  const auto logit_bytes = static_cast<double>(r.config.vocab_size) * 2;  // a row's, in bf16
  const auto budget = static_cast<double>(r.device_budget);
  const int64_t rows = r.batch * r.seq;
  if (static_cast<double>(rows) * logit_bytes * 16 <= budget) return 0;
  int64_t chunk = 8192;
  while (chunk > 1024 && static_cast<double>(chunk) * logit_bytes * 64 > budget) chunk /= 2;
  return chunk < rows ? chunk : 0;
}

std::string head_summary(const LlamaStep& step) {
  if (step.loss_chunk_rows == 0) return "";
  return "the logits " + std::to_string(step.loss_chunk_rows) + " rows at a time";
}

std::string recompute_summary(const LlamaStep& step) {
  if (!step.recomputed_kinds.empty()) return recomputed_kinds_summary(step.recomputed_kinds);
  return step.recompute == graph::RecomputePolicy::none ? "" : std::string(graph::recompute_policy_name(step.recompute));
}

std::string recompute_report(const LlamaStep& step, bool automatic) {
  const std::string s = recompute_summary(step);
  return automatic ? (s.empty() ? "none" : s) + " (auto)" : s;
}

// Built outside the lock: two threads asking for one graph at once may
// both build it; the first kept is the one every caller gets.
std::shared_ptr<const LlamaStep> LlamaStepCache::get(const std::string& key,
                                                     const std::function<std::unique_ptr<LlamaStep>()>& build) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = steps_.find(key); it != steps_.end()) return it->second;
  }
  std::shared_ptr<const LlamaStep> built(build());
  std::lock_guard<std::mutex> lock(mutex_);
  return steps_.emplace(key, std::move(built)).first->second;
}

model::LlamaStepCosts LlamaStepCache::costs(const std::string& key,
                                            const std::function<model::LlamaStepCosts()>& compute) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = costs_.find(key); it != costs_.end()) return it->second;
  }
  model::LlamaStepCosts computed = compute();
  std::lock_guard<std::mutex> lock(mutex_);
  return costs_.emplace(key, std::move(computed)).first->second;
}

std::shared_ptr<const LlamaStep> llama_step_of(const StepPlanRequest& r, bool fused,
                                               const graph::StepRecipe& asked) {
  graph::StepRecipe recipe = asked;
  recipe.loss_chunk_rows = head_chunk_rows(r);
  auto build = [&] {
    return build_llama_step(r.config, r.batch, r.seq, fused, recipe, DType::bf16, r.weighted_loss, r.documents,
                            r.tensor_parallel, r.stage, r.context);
  };
  if (!r.cache) return build();
  // Everything the graph is built from but the model's shape, which one
  // search keeps (but for --largest's layer counts).
  std::string key;
  for (int64_t v : {r.config.num_hidden_layers, r.batch, r.seq, static_cast<int64_t>(fused),
                    static_cast<int64_t>(recipe.backward), static_cast<int64_t>(recipe.recompute),
                    static_cast<int64_t>(r.weighted_loss), static_cast<int64_t>(r.documents),
                    static_cast<int64_t>(r.tensor_parallel.ranks), static_cast<int64_t>(r.tensor_parallel.rank),
                    static_cast<int64_t>(r.tensor_parallel.sequence_parallel), r.stage.first_layer,
                    r.stage.last_layer, static_cast<int64_t>(r.context.rank), static_cast<int64_t>(r.context.ranks),
                    recipe.loss_chunk_rows}) {
    key += std::to_string(v) + ",";
  }
  for (const std::string& kind : recipe.recomputed_kinds) key += kind + ";";
  key += std::to_string(recipe.seed);
  return r.cache->get(key, build);
}

std::shared_ptr<const LlamaStep> llama_step_for_context_rank(const StepPlanRequest& r, const LlamaStep& planned,
                                                             const model::LlamaContext& context) {
  StepPlanRequest own = r;
  own.context = context;
  own.loss_chunk_rows = planned.loss_chunk_rows;
  return llama_step_of(own, planned.fused_projections,
                       {.backward = true, .recompute = planned.recompute, .recomputed_kinds = planned.recomputed_kinds});
}

PlannedStep plan_llama_step(const StepPlanRequest& r) {
  plan::TrainingPlanRequest req;
  req.device_budget = r.device_budget;
  req.host_budget = r.host_budget;
  req.host_reserved = r.host_reserved;
  req.micro_batches = r.micro_batches;
  req.offload = r.offload;
  req.data_parallel = r.data_parallel;
  // The ranks sum the gradient sums where they lie: on the device.
  req.gradient_sums_on_device = r.data_parallel > 1;
  req.rates = r.rates;
  // A rank of a tensor-parallel group, a context group (each its chunk of
  // the sequence) or a pipeline does its share of every token's work: the
  // rates count the whole sequences, the FLOPs the rank's share.
  const int64_t seq = r.seq * r.context.ranks;
  req.tokens_per_micro_batch = static_cast<double>(r.batch * seq);
  req.flops_per_token = model::training_flops_per_token(r.config, seq) /
                        (r.tensor_parallel.ranks * r.context.ranks * r.pipeline_stages);
  // Context parallelism's graph takes separate projections alone.
  const std::optional<bool> fused_only = r.context.ranks > 1 ? std::optional<bool>(false) : r.fused_projections;

  auto plan_variant = [&](bool fused, const graph::StepRecipe& recipe) {
    PlannedStep p;
    p.step = llama_step_of(r, fused, recipe);
    p.state = adamw_state_spec(*p.step, r.config, r.bf16_moments, r.caller_moments);
    p.state.state_shards = r.state_shards;
    if (r.shard_gradients && r.state_shards > 1) {
      add_rings(*p.step, r.config, static_cast<int>(r.state_shards), r.shard_weights, p.state);
    }
    plan::TrainingPlanRequest with_reserve = req;
    if (r.device_reserved) with_reserve.device_reserved = r.device_reserved(*p.step);
    p.plan = plan::plan_training(p.step->step.graph, p.state, with_reserve);
    return p;
  };
  // Stacked projections only where the plan copies nothing, unless asked for.
  auto plan_recipe = [&](const std::function<graph::StepRecipe(bool fused)>& recipe) {
    if (fused_only) return plan_variant(*fused_only, recipe(*fused_only));
    try {
      PlannedStep fused = plan_variant(true, recipe(true));
      if (fused.plan.all_on_device()) return fused;
    } catch (const Error&) {
      // The separate projections' plan says why, or fits.
    }
    return plan_variant(false, recipe(false));
  };
  auto plan_policy = [&](graph::RecomputePolicy policy) {
    return plan_recipe([policy](bool) { return graph::StepRecipe{.backward = true, .recompute = policy}; });
  };

  if (r.recompute) return plan_policy(*r.recompute);
  std::optional<PlannedStep> best;
  std::optional<Error> frugal_error;  // why `layers`, which keeps the least, does not fit
  auto consider = [&](const std::function<PlannedStep()>& plan, bool frugal = false) {
    try {
      PlannedStep candidate = plan();
      if (!best || candidate.plan.step_seconds < best->plan.step_seconds) best = std::move(candidate);
    } catch (const Error& e) {
      if (frugal) frugal_error = e;
    }
  };
  for (graph::RecomputePolicy policy :
       {graph::RecomputePolicy::none, graph::RecomputePolicy::selective, graph::RecomputePolicy::layers}) {
    consider([&] { return plan_policy(policy); }, policy == graph::RecomputePolicy::layers);
  }
  // The kinds `layers` remakes, cheapest per byte first (for each layout of
  // the projections, whose values differ), and the steps that remake the
  // cheapest 1, 2, ... of them; all of them is `layers`.
  std::vector<RecomputeKindCost> ranked[2];
  for (bool fused : {false, true}) {
    if (fused_only && *fused_only != fused) continue;
    const auto layers = llama_step_of(r, fused, {.backward = true, .recompute = graph::RecomputePolicy::layers});
    ranked[fused] = recompute_kinds_by_cost(layers->step.graph, r.rates);
  }
  for (size_t k = 1; k < ranked[fused_only.value_or(false)].size(); ++k) {
    consider([&] {
      return plan_recipe([&](bool fused) {
        graph::StepRecipe recipe{.backward = true};
        const auto& kinds = ranked[fused];
        for (size_t i = 0; i < std::min(k, kinds.size()); ++i) recipe.recomputed_kinds.push_back(kinds[i].kind);
        return recipe;
      });
    });
  }
  if (!best) throw *frugal_error;  // nothing fits: say why
  return std::move(*best);
}

PlannedStep plan_data_parallel_step(StepPlanRequest r, StateSharding shard) {
  constexpr double kFurtherShardingGain = 0.97;
  r.state_shards = 1;
  r.shard_gradients = r.shard_weights = false;
  if (r.data_parallel <= 1 || shard == StateSharding::none) return plan_llama_step(r);
  // Every level keeps the optimizer's share on the device, which these
  // offload modes send home.
  const bool state_home = r.offload == plan::OffloadMode::on || r.offload == plan::OffloadMode::stream;
  SPW_CHECK(!state_home || shard == StateSharding::automatic, "--shard " + std::string(enum_name(shard)),
            "keeps each rank's share of the training state on its device, and --offload ",
            plan::offload_mode_name(r.offload), " sends the state home; --offload auto lets the plan choose");
  if (state_home) return plan_llama_step(r);
  std::optional<PlannedStep> best;
  std::string why;
  for (StateSharding level : {StateSharding::optimizer, StateSharding::gradients, StateSharding::weights}) {
    if (shard != StateSharding::automatic && shard != level) continue;
    StepPlanRequest sharded = r;
    sharded.state_shards = static_cast<uint64_t>(r.data_parallel);
    sharded.shard_gradients = level != StateSharding::optimizer;
    sharded.shard_weights = level == StateSharding::weights;
    try {
      PlannedStep p = plan_llama_step(sharded);
      if (!(p.plan.optimizer_resident && p.plan.weights_resident)) {
        why = "it places: " + p.plan.layout();
        continue;
      }
      // Each level further adds collectives to every micro-batch, which the
      // prediction prices only roughly: it must be clearly faster.
      if (!best || p.plan.step_seconds < kFurtherShardingGain * best->plan.step_seconds) best = std::move(p);
    } catch (const Error& e) {
      why = e.what();
    }
  }
  if (best) return std::move(*best);
  SPW_CHECK(shard == StateSharding::automatic, "--shard " + std::string(enum_name(shard)),
            "the plan cannot keep the whole training state on the device even with ", r.data_parallel,
            " shares of it (", why, "); --shard none lets it offload");
  return plan_llama_step(r);
}

}  // namespace spillway::train
