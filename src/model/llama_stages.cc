#include "model/llama_stages.h"

#include <algorithm>
#include <limits>
#include <string>

#include "base/status.h"
#include "graph/autodiff.h"
#include "plan/cost_model.h"

namespace spillway::model {

LlamaStepCosts llama_step_costs(const LlamaConfig& config, int64_t batch, int64_t seq,
                                const plan::MachineRates& rates) {
  graph::Graph g;
  graph::Builder b(g, DType::bf16);
  const LlamaGraph m = build_llama(b, config, batch, seq);
  graph::append_backward(b, m.loss, m.parameters);
  return llama_graph_costs(g, config.num_hidden_layers, rates);
}

LlamaStepCosts llama_graph_costs(const graph::Graph& g, int64_t layers, const plan::MachineRates& rates) {
  LlamaStepCosts costs;
  costs.layers.assign(static_cast<size_t>(layers), 0.0);
  costs.forward_layers.assign(static_cast<size_t>(layers), 0.0);
  const std::string layer_prefix = "model.layers.";
  for (const graph::Node& n : g.nodes()) {
    const double s = plan::node_cost(g, n, rates).seconds;
    const double forward = n.backward || n.recompute ? 0.0 : s;
    // Backward nodes keep their forward node's name as a prefix.
    if (n.name.rfind(layer_prefix, 0) == 0) {
      const size_t end = n.name.find('.', layer_prefix.size());
      const size_t layer = std::stoul(n.name.substr(layer_prefix.size(), end - layer_prefix.size()));
      costs.layers.at(layer) += s;
      costs.forward_layers.at(layer) += forward;
    } else if (n.name.rfind("model.embed_tokens", 0) == 0) {
      costs.embedding += s;
      costs.forward_embedding += forward;
    } else {
      costs.head += s;
    }
  }
  return costs;
}

int llama_stage_of_tensor(const LlamaConfig& config, const std::vector<LlamaStage>& stages, int t) {
  const int64_t layers = config.num_hidden_layers;
  if (t == 0) return 0;
  if (t > kLlamaLayerTensors * layers) return static_cast<int>(stages.size()) - 1;  // the final norm, lm_head
  const int64_t layer = (t - 1) / kLlamaLayerTensors;
  for (size_t s = 0; s < stages.size(); ++s) {
    const int64_t last = stages[s].last_layer < 0 ? layers : stages[s].last_layer;
    if (layer >= stages[s].first_layer && layer < last) return static_cast<int>(s);
  }
  throw Error("pipeline stage", "no stage holds layer " + std::to_string(layer));
}

double stage_seconds(const LlamaStepCosts& costs, const LlamaStage& stage) {
  const auto layers = static_cast<int64_t>(costs.layers.size());
  const int64_t last = stage.last_layer < 0 ? layers : stage.last_layer;
  double s = stage.has_embedding() ? costs.embedding : 0.0;
  for (int64_t i = stage.first_layer; i < last; ++i) s += costs.layers[static_cast<size_t>(i)];
  return last == layers ? s + costs.head : s;
}

double stage_slot_seconds(const LlamaStepCosts& costs, const LlamaStage& stage, bool last) {
  double s = stage_seconds(costs, stage);
  if (last || costs.forward_layers.empty()) return s;
  const int64_t end = stage.last_layer < 0 ? static_cast<int64_t>(costs.layers.size()) : stage.last_layer;
  if (stage.has_embedding()) s += costs.forward_embedding;
  for (int64_t i = stage.first_layer; i < end; ++i) s += costs.forward_layers[static_cast<size_t>(i)];
  return s;
}

std::vector<LlamaStage> balance_llama_stages(const LlamaStepCosts& costs, int stages) {
  const auto layers = static_cast<int64_t>(costs.layers.size());
  SPW_CHECK(stages >= 1 && stages <= layers, "--pp", stages, " pipeline stages need at least as many layers; the model has ",
            layers);
  // best[k][l]: the least slowest-stage time of the first l layers as k
  // stages (the last of them ending at layer l); from[k][l]: where it starts.
  constexpr double kNone = std::numeric_limits<double>::infinity();
  const auto S = static_cast<size_t>(stages), L = static_cast<size_t>(layers);
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(L + 1, kNone));
  std::vector<std::vector<int64_t>> from(S + 1, std::vector<int64_t>(L + 1, 0));
  best[0][0] = 0;
  for (size_t k = 1; k <= S; ++k) {
    for (size_t l = k; l <= L; ++l) {
      for (size_t f = k - 1; f < l; ++f) {
        if (best[k - 1][f] == kNone) continue;
        const LlamaStage s{static_cast<int64_t>(f), static_cast<int64_t>(l)};
        const double slowest = std::max(best[k - 1][f], stage_slot_seconds(costs, s, k == S));
        if (slowest < best[k][l]) {
          best[k][l] = slowest;
          from[k][l] = static_cast<int64_t>(f);
        }
      }
    }
  }
  std::vector<LlamaStage> out(S);
  int64_t end = layers;
  for (size_t k = S; k >= 1; --k) {
    out[k - 1] = {from[k][static_cast<size_t>(end)], end};
    end = out[k - 1].first_layer;
  }
  return out;
}

}  // namespace spillway::model
