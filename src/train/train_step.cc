#include "train/train_step.h"

#include "base/status.h"

namespace spillway::train {

TrainStep::TrainStep(const model::LlamaConfig& config, int64_t batch, int64_t seq, MemorySpace& space,
                     bool with_backward)
    : batch_(batch), seq_(seq) {
  graph::Builder b(graph_, DType::f32);
  model_ = model::build_llama(b, config, batch, seq);
  graph_.mark_output(model_.loss);
  if (with_backward) {
    grads_ = graph::append_backward(b, model_.loss, model_.parameters);
  } else {
    graph_.mark_output(model_.logits);
  }
  executor_ = std::make_unique<exec::CpuExecutor>(graph_, space);
}

double TrainStep::run(model::LlamaWeights& weights, std::span<const int32_t> tokens,
                      std::span<const int32_t> targets) {
  const auto n = static_cast<size_t>(batch_ * seq_);
  SPW_CHECK(tokens.size() == n && targets.size() == n, "train step",
            "batch holds ", tokens.size(), " tokens and ", targets.size(), " targets, the step needs ", n);
  auto& tensors = weights.tensors();
  SPW_CHECK(tensors.size() == model_.parameters.size(), "train step", "weights hold ", tensors.size(),
            " tensors, the model has ", model_.parameters.size());
  executor_->bind(model_.tokens, std::span<const int32_t>(tokens));
  executor_->bind(model_.targets, std::span<const int32_t>(targets));
  for (size_t i = 0; i < tensors.size(); ++i) {
    executor_->bind(model_.parameters[i], std::span<float>(tensors[i].data));
  }
  executor_->run();
  return executor_->read<float>(model_.loss)[0];
}

void TrainStep::write_gradients(model::LlamaWeights& grads, float scale, bool accumulate) const {
  auto& tensors = grads.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::span<const float> g = executor_->read<float>(grads_[model_.parameters[i]]);
    float* out = tensors[i].data.data();
    if (accumulate) {
      for (size_t j = 0; j < g.size(); ++j) out[j] += scale * g[j];
    } else {
      for (size_t j = 0; j < g.size(); ++j) out[j] = scale * g[j];
    }
  }
}

}  // namespace spillway::train
