#include <omp.h>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "train/engine.h"
#include "train/train_step.h"

#ifdef SPILLWAY_HAS_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace spillway::train {

namespace {

class CpuEngine final : public Engine {
 public:
  CpuEngine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& o)
      : weights_(weights),
        optimizer_(optimizer),
        options_(o),
        space_(make_host_heap_space("cpu:device", o.device_memory ? o.device_memory : MemorySpace::kUnlimited)),
        step_(weights.config(), o.batch, o.seq, *space_),
        eval_(weights.config(), o.batch, o.seq, *space_, /*with_backward=*/false),
        grads_(model::LlamaWeights::zeros(weights.config())) {}

  std::string description() const override {
    return "cpu, " + std::to_string(omp_get_max_threads()) + " threads";
  }

  StepStats train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t micro_batches,
                       double lr) override {
    const auto n = static_cast<size_t>(options_.batch * options_.seq);
    SPW_CHECK(inputs.size() == n * static_cast<size_t>(micro_batches) && targets.size() == inputs.size(),
              "train step", "got ", inputs.size(), " tokens for ", micro_batches, " micro-batches of ", n);
    StepStats stats;
    const float share = 1.0f / static_cast<float>(micro_batches);
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      stats.loss += step_.run(weights_, inputs.subspan(micro * n, n), targets.subspan(micro * n, n)) * share;
      step_.write_gradients(grads_, share, micro > 0);
    }
    stats.grad_norm = clip_grad_norm(grads_, options_.grad_clip);
    optimizer_.step(weights_, grads_, lr);
    return stats;
  }

  double eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets) override {
    return eval_.run(weights_, inputs, targets);
  }

  void sync_to_host() override {}
  uint64_t peak_device_bytes() const override { return space_->peak(); }

 private:
  model::LlamaWeights& weights_;
  AdamW& optimizer_;
  EngineOptions options_;
  std::unique_ptr<MemorySpace> space_;
  TrainStep step_;
  TrainStep eval_;
  model::LlamaWeights grads_;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options) {
  return std::make_unique<CpuEngine>(weights, optimizer, options);
}

std::unique_ptr<Engine> make_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options) {
  SPW_CHECK(options.device == "auto" || options.device == "cpu" || options.device == "cuda", "--device",
            "unknown device '", options.device, "' (auto, cpu or cuda)");
#ifdef SPILLWAY_HAS_CUDA
  if (options.device == "cuda" || (options.device == "auto" && cuda_device_count() > 0)) {
    return make_cuda_engine(weights, optimizer, options);
  }
#else
  SPW_CHECK(options.device != "cuda", "--device", "this spillway was built without CUDA (SPILLWAY_CUDA=OFF)");
#endif
  return make_cpu_engine(weights, optimizer, options);
}

}  // namespace spillway::train
