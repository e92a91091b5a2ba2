#include "train/train_step.h"

#include <algorithm>

#include "base/status.h"
#include "device/cpu/cpu_stream.h"
#include "graph/tensor_parallel.h"
#include "model/llama_sharding.h"
#include "ops/dropout.h"

namespace spillway::train {

TrainStep::TrainStep(const model::LlamaConfig& config, int64_t batch, int64_t seq, bool with_backward,
                     bool weighted_loss, bool documents, const model::LoraConfig* lora, const StepSplit* split)
    : batch_(batch), seq_(seq), runner_(split ? split->groups : nullptr) {
  graph::Graph forward;
  graph::Builder b(forward, DType::f32);
  model_ = model::build_llama(b, config, batch, seq,
                              {.weighted_loss = weighted_loss,
                               .documents = documents,
                               .lora = lora,
                               .adapter_dropout = with_backward,
                               .context = split ? split->context : model::LlamaContext{}});
  if (!with_backward) forward.mark_output(model_.logits);
  forward.mark_output(model_.loss);
  graph::StepRecipe recipe;
  recipe.backward = with_backward;
  std::optional<graph::RankGraph> rank;
  std::optional<graph::Builder> rank_builder;
  if (split && split->tp.ranks > 1) {
    SPW_CHECK(lora == nullptr, "--tp", "LoRA adapters are not split over tensor-parallel ranks yet");
    rank = model::shard_llama(forward, model_, config, DType::f32, split->tp);
    rank_builder.emplace(rank->graph, DType::f32);
    recipe.seed = graph::seed_gradient(split->tp);
  }
  // Each rank's loss is its chunk's: the objective their mean.
  if (split) recipe.seed /= split->context.ranks;
  graph::StepGraph step =
      graph::make_step_graph(rank_builder ? *rank_builder : b, model_.loss, model_.trainable(), recipe);
  if (model_.lora_scaling.valid()) {
    const auto r = static_cast<size_t>(lora->rank);
    lora_scaling_.assign(r * r, 0.0f);
    for (size_t i = 0; i < r; ++i) lora_scaling_[i * r + i] = static_cast<float>(lora->scaling());
  }
  graph_ = std::move(step.graph);
  grads_ = std::move(step.grads);
}

TrainStep::TrainStep(const model::LlamaConfig& config, int64_t batch, int64_t seq, MemorySpace& space,
                     bool with_backward, bool weighted_loss, bool documents, const model::LoraConfig* lora,
                     const StepSplit* split)
    : TrainStep(config, batch, seq, with_backward, weighted_loss, documents, lora, split) {
  program_ = std::make_unique<exec::Executor>(graph_, space, runner_);
  bind_own_inputs();
}

TrainStep::TrainStep(const model::LlamaConfig& config, int64_t batch, int64_t seq, Device& device,
                     bool with_backward, bool weighted_loss, bool documents, const model::LoraConfig* lora)
    : TrainStep(config, batch, seq, with_backward, weighted_loss, documents, lora, nullptr) {
  device_ = &device;
  auto cost = [](uint64_t n) { return MemorySpace::accounted_bytes(n); };
  plan::Placement placement =
      plan::plan_placement(graph_, device.device_memory().budget(), device.host_memory().budget(), cost);
  streamed_ = std::make_unique<exec::StreamedNodeRunner>(runner_, as_cpu_stream(device.stream(StreamKind::compute)));
  program_ = std::make_unique<exec::PlannedExecutor>(graph_, std::move(placement), device, device.host_memory(),
                                                     *streamed_);
  bind_own_inputs();
}

void TrainStep::bind_own_inputs() {
  if (!lora_scaling_.empty()) program_->bind(model_.lora_scaling, std::span<float>(lora_scaling_));
  if (model_.dropout_key.valid()) program_->bind(model_.dropout_key, std::span<int32_t>(dropout_key_));
}

void TrainStep::set_dropout_key(uint64_t key) { ops::dropout_key_words(key, dropout_key_.data()); }

void TrainStep::bind_adapters(model::LoraWeights& adapters, model::LoraWeights* grads) {
  SPW_CHECK(!model_.adapters.empty(), "train step", "adapters given to a step without LoRA");
  auto& a = adapters.tensors();
  SPW_CHECK(a.size() == model_.adapters.size(), "train step", "the adapters hold ", a.size(),
            " tensors, the step's LoRA has ", model_.adapters.size());
  SPW_CHECK(grads != nullptr || grads_.of.empty(), "train step", "a LoRA step with a backward pass needs ",
            "somewhere for the adapters' gradients");
  for (size_t i = 0; i < a.size(); ++i) {
    SPW_CHECK(a[i].shape == graph_.value(model_.adapters[i]).shape, "train step", a[i].name, " is ",
              a[i].shape.str(), ", the step's adapter is ", graph_.value(model_.adapters[i]).shape.str());
    program_->bind(model_.adapters[i], std::span<float>(a[i].data));
    if (!grads_.of.empty()) {
      program_->bind(grads_[model_.adapters[i]], std::span<float>(grads->tensors().at(i).data));
    }
  }
  adapters_bound_ = true;
}

const plan::Placement* TrainStep::placement() const {
  auto* planned = dynamic_cast<const exec::PlannedExecutor*>(program_.get());
  return planned ? &planned->placement() : nullptr;
}

double TrainStep::run(model::LlamaWeights& weights, std::span<const int32_t> tokens,
                      std::span<const int32_t> targets, model::LlamaWeights& grads,
                      std::span<const float> loss_weights, std::span<const int32_t> positions,
                      std::span<const int32_t> doc_starts) {
  SPW_CHECK(!grads_.of.empty(), "train step", "a forward-only step computes no gradients");
  SPW_CHECK(model_.adapters.empty(), "train step", "a LoRA step's gradients go to its bound adapters' gradients");
  auto& g = grads.tensors();
  SPW_CHECK(g.size() == model_.parameters.size(), "train step", "gradients hold ", g.size(),
            " tensors, the model has ", model_.parameters.size());
  for (size_t i = 0; i < g.size(); ++i) program_->bind(grads_[model_.parameters[i]], std::span<float>(g[i].data));
  return run_bound(weights, tokens, targets, loss_weights, positions, doc_starts);
}

double TrainStep::run(model::LlamaWeights& weights, std::span<const int32_t> tokens,
                      std::span<const int32_t> targets, std::span<const float> loss_weights,
                      std::span<const int32_t> positions, std::span<const int32_t> doc_starts) {
  if (grads_.of.empty() || !model_.adapters.empty()) {
    return run_bound(weights, tokens, targets, loss_weights, positions, doc_starts);
  }
  if (!own_grads_) own_grads_ = model::LlamaWeights::zeros(weights.config());
  for (auto& t : own_grads_->tensors()) std::fill(t.data.begin(), t.data.end(), 0.0f);
  return run(weights, tokens, targets, *own_grads_, loss_weights, positions, doc_starts);
}

double TrainStep::run_bound(model::LlamaWeights& weights, std::span<const int32_t> tokens,
                            std::span<const int32_t> targets, std::span<const float> loss_weights,
                            std::span<const int32_t> positions, std::span<const int32_t> doc_starts) {
  const auto n = static_cast<size_t>(batch_ * seq_);
  SPW_CHECK(tokens.size() == n && targets.size() == n, "train step",
            "batch holds ", tokens.size(), " tokens and ", targets.size(), " targets, the step needs ", n);
  auto& tensors = weights.tensors();
  SPW_CHECK(tensors.size() == model_.parameters.size(), "train step", "weights hold ", tensors.size(),
            " tensors, the model has ", model_.parameters.size());
  program_->bind(model_.tokens, std::span<const int32_t>(tokens));
  program_->bind(model_.targets, std::span<const int32_t>(targets));
  if (model_.loss_weights.valid()) {
    SPW_CHECK(loss_weights.size() == n, "train step", "the weighted loss got ", loss_weights.size(),
              " token weights for ", n, " targets");
    program_->bind(model_.loss_weights, loss_weights);
  } else {
    SPW_CHECK(loss_weights.empty(), "train step", "token weights given to a step whose loss is unweighted");
  }
  if (model_.positions.valid()) {
    SPW_CHECK(positions.size() == n && doc_starts.size() == n, "train step", "packed rows got ", positions.size(),
              " positions and ", doc_starts.size(), " document starts for ", n, " tokens");
    program_->bind(model_.positions, positions);
    program_->bind(model_.doc_starts, doc_starts);
  } else {
    SPW_CHECK(positions.empty() && doc_starts.empty(), "train step",
              "positions or document starts given to a step whose rows are not packed");
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    program_->bind(model_.parameters[i], std::span<float>(tensors[i].data));
  }
  SPW_CHECK(model_.adapters.empty() || adapters_bound_, "train step", "a LoRA step runs after bind_adapters");
  program_->run();
  if (device_) device_->synchronize();  // a planned step only enqueues its work
  return program_->read<float>(model_.loss)[0];
}

void TrainStep::write_gradients(model::LlamaWeights& grads, float scale, bool accumulate) const {
  SPW_CHECK(own_grads_.has_value(), "train step", "no gradients kept: run() without a gradient buffer first");
  auto& tensors = grads.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::vector<float>& g = own_grads_->tensors()[i].data;
    float* out = tensors[i].data.data();
    if (accumulate) {
      for (size_t j = 0; j < g.size(); ++j) out[j] += scale * g[j];
    } else {
      for (size_t j = 0; j < g.size(); ++j) out[j] = scale * g[j];
    }
  }
}

}  // namespace spillway::train
