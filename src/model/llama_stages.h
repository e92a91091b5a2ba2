// Pipeline parallelism's split of LLaMA into stages: contiguous runs of
// layers, the embedding with the first and the final norm, lm_head and loss
// with the last (model::LlamaStage), balanced by the cost model so that no
// stage's micro-batch takes much longer than another's: the embedding and
// the vocabulary-wide lm_head are not free.
#pragma once

#include <cstdint>
#include <vector>

#include "model/llama_config.h"
#include "model/llama_graph.h"
#include "plan/machine_rates.h"

namespace spillway::model {

// Predicted seconds of one micro-batch's forward and backward pass, by
// part: each layer's, the embedding's, and the final norm's, lm_head's and
// loss's together.
struct LlamaStepCosts {
  std::vector<double> layers;
  double embedding = 0, head = 0;
  // Their forward nodes' alone (empty: not known), which every stage but
  // the last runs once more ahead of its step (train/pipeline_walk.h).
  std::vector<double> forward_layers;
  double forward_embedding = 0;
};
LlamaStepCosts llama_step_costs(const LlamaConfig& config, int64_t batch, int64_t seq,
                                const plan::MachineRates& rates);
// The same for any graph of build_llama's names (a rank's graph, a step
// graph): each node's seconds by the part its name says, the nodes of
// neither a layer nor the embedding counted with the head.
LlamaStepCosts llama_graph_costs(const graph::Graph& g, int64_t layers, const plan::MachineRates& rates);

// The `stages` stages whose slowest slot is the fastest any contiguous
// split gives (each stage at least one layer): a stage's step, and for each
// but the last its forward pass run ahead. Error naming --pp where the
// model has fewer layers than stages.
std::vector<LlamaStage> balance_llama_stages(const LlamaStepCosts& costs, int stages);
// The stage of `stages` that holds checkpoint tensor `t` (parameter_specs'
// order: the embedding, nine a layer, the final norm, lm_head), a tied
// table's being the first stage's.
int llama_stage_of_tensor(const LlamaConfig& config, const std::vector<LlamaStage>& stages, int t);
// A stage's predicted seconds; its slot's, with the forward pass ahead
// unless it is the last.
double stage_seconds(const LlamaStepCosts& costs, const LlamaStage& stage);
double stage_slot_seconds(const LlamaStepCosts& costs, const LlamaStage& stage, bool last);

}  // namespace spillway::model
