#include <omp.h>

#include <algorithm>

#include "base/bytes.h"
#include "base/log.h"
#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "train/engine.h"
#include "train/train_step.h"

namespace spillway::train {

namespace {

class CpuEngine final : public Engine {
 public:
  CpuEngine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& o)
      : weights_(weights),
        optimizer_(optimizer),
        options_(o),
        space_(make_host_heap_space("cpu:device", o.device_memory ? o.device_memory : MemorySpace::kUnlimited)),
        host_(make_host_heap_space("cpu:pinned_host", MemorySpace::kUnlimited)),
        step_(weights.config(), o.batch, o.seq, *space_, true, offload(o)),
        eval_(weights.config(), o.batch, o.seq, *space_, /*with_backward=*/false, offload(o)),
        grads_(model::LlamaWeights::zeros(weights.config())) {}

  std::string description() const override {
    std::string d = "cpu, " + std::to_string(omp_get_max_threads()) + " threads";
    if (const plan::Placement* p = step_.placement()) {
      d += "; device budget " + format_bytes(options_.device_memory) + " planned: peak " +
           format_bytes(p->device_peak) + ", " + std::to_string(p->values_offloaded) + " values offloaded, " +
           format_bytes(p->bytes_loaded + p->bytes_stored) + " moved per micro-step";
    }
    return d;
  }

  StepStats train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t micro_batches,
                       double lr) override {
    const size_t n = micro_batch_tokens(options_, inputs, targets, micro_batches);
    StepStats stats;
    const float share = 1.0f / static_cast<float>(micro_batches);
    // The step adds each micro-batch's gradients into grads_; AdamW takes
    // their mean, clipped, through one scale.
    for (auto& t : grads_.tensors()) std::fill(t.data.begin(), t.data.end(), 0.0f);
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      stats.loss += step_.run(weights_, inputs.subspan(micro * n, n), targets.subspan(micro * n, n), grads_) * share;
    }
    const double scale =
        accumulated_grad_scale(global_grad_norm(grads_), micro_batches, options_.grad_clip, &stats.grad_norm);
    if (profiling_) ++profiled_steps_;
    optimizer_.step(weights_, grads_, lr, scale);
    return stats;
  }

  double eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets) override {
    return eval_.run(weights_, inputs, targets);
  }

  std::string device_name() const override { return "cpu"; }
  bool on_gpu() const override { return false; }
  void sync_to_host() override {}
  uint64_t peak_device_bytes() const override { return space_->peak(); }
  void set_profiling(bool on) override {
    if (auto* e = dynamic_cast<exec::Executor*>(&step_.program())) e->set_profiling(on);
    profiling_ = on;
  }
  std::string profile_report() const override {
    auto* e = dynamic_cast<const exec::Executor*>(&const_cast<TrainStep&>(step_).program());
    return e ? op_time_report(step_.graph(), e->node_seconds(), std::max(1, profiled_steps_), 0)
             : "no profile under a device budget\n";
  }

 private:
  model::LlamaWeights& weights_;
  AdamW& optimizer_;
  EngineOptions options_;
  // Members are built in declaration order, so host_ exists when the steps ask.
  std::optional<Offload> offload(const EngineOptions& o) const {
    if (o.device_memory == 0) return std::nullopt;
    return Offload{o.device_memory, host_.get()};
  }

  std::unique_ptr<MemorySpace> space_;
  std::unique_ptr<MemorySpace> host_;
  TrainStep step_;
  TrainStep eval_;
  model::LlamaWeights grads_;  // the sum of the micro-batches' gradients
  bool profiling_ = false;
  int profiled_steps_ = 0;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options) {
  return std::make_unique<CpuEngine>(weights, optimizer, options);
}

}  // namespace spillway::train
