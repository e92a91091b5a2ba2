// The LLaMA training step planned for one GPU: the step graph the recipe
// makes (graph/step_recipe.h) for each variant the options leave open
// (q|k|v and gate|up stacked or not, a recomputation policy), the state
// AdamW keeps described to the planner (train/adamw_state.h), and the
// fastest predicted plan that fits. The GPU engine runs what this returns
// and `spillway plan` prints it, so the prediction and the run are one
// program.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "graph/recompute.h"
#include "graph/step_recipe.h"
#include "graph/tensor_parallel.h"
#include "model/llama_config.h"
#include "model/llama_graph.h"
#include "model/llama_stages.h"
#include "plan/training_plan.h"
#include "train/run_config.h"

namespace spillway::train {

// A LLaMA step graph and the model's handles into it.
struct LlamaStep {
  graph::StepGraph step;
  model::LlamaGraph model;
  bool fused_projections = false;
  graph::RecomputePolicy recompute = graph::RecomputePolicy::none;
  // A pipeline stage short of the loss: the gradient of its hidden_out,
  // handed back by the next stage (an input); else invalid.
  graph::Value hidden_out_grad;
  std::vector<std::string> recomputed_kinds;  // where the plan chose kinds (graph::StepRecipe)
  int64_t loss_chunk_rows = 0;                // graph::StepRecipe's
};

// What a step remakes in its backward pass, for a plan's description: ""
// (nothing), a policy's name, or the kinds of values.
std::string recompute_summary(const LlamaStep& step);
// The same as a run reports it: with `automatic` (the planner chose), also
// where it chose nothing: "none (auto)", "layers (auto)".
std::string recompute_report(const LlamaStep& step, bool automatic);

// LLaMA's parameters and AdamW's state beside them, as the planner sees them.
// `caller_moments`: the caller brings fp32 moments (a resumed run), held
// until the state has taken them.
plan::TrainingStateSpec adamw_state_spec(const LlamaStep& step, const model::LlamaConfig& config, bool bf16_moments,
                                         bool caller_moments = false);

// `recipe.backward` false gives the forward step alone (evaluation).
// `weighted_loss`: the loss weighted per token; `documents`: packed rows
// (both model::LlamaGraphOptions). With `tp` of more than one rank, the
// step of rank tp.rank of a tensor-parallel group (model/llama_sharding.h).
// A `stage` short of the loss hands its hidden state on: its backward pass
// starts from the input "hidden_out.grad" (the gradient the next stage
// hands back), and a stage without the embedding also differentiates its
// hidden_in, to hand that back. With `context` over several ranks, `seq` is
// the rank's chunk of each sequence (model::LlamaContext). With `lora`,
// the model's weights are frozen inputs and the backward pass
// differentiates the adapters alone (model::LlamaGraph::trainable).
std::unique_ptr<LlamaStep> build_llama_step(const model::LlamaConfig& config, int64_t batch, int64_t seq,
                                            bool fused_projections, const graph::StepRecipe& recipe, DType dtype,
                                            bool weighted_loss = false, bool documents = false,
                                            const graph::TensorParallelism& tp = {},
                                            const model::LlamaStage& stage = {},
                                            const model::LlamaContext& context = {},
                                            const model::LoraConfig* lora = nullptr);

// Step graphs already built, by what they were built from: a search over
// layouts plans the same rank graphs for many data-parallel degrees and
// --shard levels, and building them costs more than placing them. Threads
// of one search share it.
class LlamaStepCache {
 public:
  std::shared_ptr<const LlamaStep> get(const std::string& key,
                                       const std::function<std::unique_ptr<LlamaStep>()>& build);
  // The same for the cost model's times by part (model/llama_stages.h).
  model::LlamaStepCosts costs(const std::string& key, const std::function<model::LlamaStepCosts()>& compute);

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const LlamaStep>, std::less<>> steps_;
  std::map<std::string, model::LlamaStepCosts, std::less<>> costs_;
};

struct StepPlanRequest {
  model::LlamaConfig config;
  int64_t batch = 1, seq = 1, micro_batches = 1;
  // Unset: stacked where the plan copies nothing (one wide GEMM each), else
  // separate (the planner places the smaller blocks better; see
  // docs/performance.md).
  std::optional<bool> fused_projections;
  // Unset: the recomputation with the fastest predicted step, of the
  // policies and the kinds of values ranked by their cost to remake
  // (train/recompute_choice.h).
  std::optional<graph::RecomputePolicy> recompute = graph::RecomputePolicy::none;
  bool bf16_moments = false;
  bool weighted_loss = false;  // the step takes per-token loss weights (instruction data)
  bool caller_moments = false;  // the caller brings fp32 moments (adamw_state_spec)
  bool documents = false;      // the step takes packed rows' positions and document starts
  plan::OffloadMode offload = plan::OffloadMode::automatic;
  // Ranks that sum their gradient sums every step (on the device), and how
  // many shares of the optimizer's state each keeps one of.
  int data_parallel = 1;
  uint64_t state_shards = 1;
  // The rank's step of a tensor-parallel group (one rank: the whole step).
  graph::TensorParallelism tensor_parallel;
  // A pipeline stage's layers (the whole model by default), and a context
  // rank's chunk of each sequence: `seq` is then the chunk's tokens.
  model::LlamaStage stage;
  model::LlamaContext context;
  int pipeline_stages = 1;  // the stages `stage` is one of: the rank's share of each token's FLOPs
  // The rate a hidden state crosses from stage to stage at (bytes a
  // second); 0: rates.collective_bytes.
  double stage_link_bytes = 0;
  // Sharded further over the state_shards ranks: the gradient sums
  // (ZeRO-2), and the weights too (ZeRO-3).
  bool shard_gradients = false, shard_weights = false;
  uint64_t device_budget = 0, host_budget = 0;
  // Rows of logits the head makes at a time (graph::StepRecipe); unset:
  // head_chunk_rows's choice.
  std::optional<int64_t> loss_chunk_rows;
  // Of host_budget (the process's), what the process holds beside the
  // state and the step's values (plan::TrainingPlanRequest::host_reserved).
  uint64_t host_reserved = 0;
  // The device bytes a step of this graph takes outside the graph and the
  // state (kernel workspaces): the GPU engine makes its runners for the
  // candidate and says what they took.
  std::function<uint64_t(const LlamaStep&)> device_reserved;
  plan::MachineRates rates;
  // Where set, the step graphs are taken from here and kept here.
  std::shared_ptr<LlamaStepCache> cache;
};

// The head in chunks where one micro-batch's whole logits would take more
// than a sixteenth of the device budget: chunks of 1,024 to 8,192 rows whose
// logits take at most a sixty-fourth of it. 0 (whole) otherwise, and for a
// tensor-parallel rank (whose head is split by vocabulary).
int64_t head_chunk_rows(const StepPlanRequest& r);
// "the logits 4,096 rows at a time" or "", for descriptions.
std::string head_summary(const LlamaStep& step);

// The rank's step graph of `r` with these projections and recipe, the head
// chunked as r says: from r.cache where it has it.
std::shared_ptr<const LlamaStep> llama_step_of(const StepPlanRequest& r, bool fused_projections,
                                               const graph::StepRecipe& recipe);
// `planned` (a training step of `r`) remade for another rank of r's context
// group: the same projections and recipe (recomputation, head chunks), the
// rank's own chunks. The GPU engine plans every context rank as rank 0.
std::shared_ptr<const LlamaStep> llama_step_for_context_rank(const StepPlanRequest& r, const LlamaStep& planned,
                                                             const model::LlamaContext& context);

struct PlannedStep {
  std::shared_ptr<const LlamaStep> step;  // a stable address: what device_reserved was shown
  plan::TrainingStateSpec state;
  plan::TrainingPlan plan;
};

// Throws the planner's Error (naming --device-mem or --host-mem) when no
// variant fits.
PlannedStep plan_llama_step(const StepPlanRequest& request);

// The regions the GPU engine shards a step's state by under ZeRO-2/3
// (train/shard_layout.h's layer_region_keys), by graph parameter.
std::vector<int> llama_region_keys(const LlamaStep& step, const model::LlamaConfig& config);
// The --shard level a plan's state says.
StateSharding sharding_level(const plan::TrainingStateSpec& state);

// Data parallelism over request.data_parallel ranks: the state sharded over
// them as far as `shard` says, or (automatic) the fastest predicted of the
// levels that keep every rank's share, the weights and the gradient sums on
// its device (a further level only where it is 3% faster; the plan's state
// says which), else kept whole by every rank, offloading as the plan says. Error naming --shard
// when it demands sharding that cannot be.
PlannedStep plan_data_parallel_step(StepPlanRequest request, StateSharding shard);

}  // namespace spillway::train
