#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "base/bytes.h"
#include "base/log.h"
#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "train/engine.h"
#include "train/train_step.h"

#ifdef SPILLWAY_HAS_CUDA
#include "device/cuda/cuda_device.h"
#include "plan/training_plan.h"
#endif

namespace spillway::train {

namespace {

class CpuEngine final : public Engine {
 public:
  CpuEngine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& o)
      : weights_(weights),
        optimizer_(optimizer),
        options_(o),
        space_(make_host_heap_space("cpu:device",
                                    o.memory.device_mem ? o.memory.device_mem : MemorySpace::kUnlimited)),
        host_(make_host_heap_space("cpu:pinned_host", MemorySpace::kUnlimited)),
        step_(weights.config(), o.batch, o.seq, *space_, true, offload(o)),
        eval_(weights.config(), o.batch, o.seq, *space_, /*with_backward=*/false, offload(o)),
        grads_(model::LlamaWeights::zeros(weights.config())) {}

  std::string description() const override {
    std::string d = "cpu, " + std::to_string(omp_get_max_threads()) + " threads";
    if (const plan::Placement* p = step_.placement()) {
      d += "; device budget " + format_bytes(options_.memory.device_mem) + " planned: peak " +
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
    if (o.memory.device_mem == 0) return std::nullopt;
    return Offload{o.memory.device_mem, host_.get()};
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

std::string op_time_report(const graph::Graph& graph, const std::vector<double>& node_seconds, int steps,
                           double other_seconds) {
  std::map<std::string, double> by_kind;
  double total = other_seconds;
  for (size_t i = 0; i < node_seconds.size(); ++i) {
    const graph::Node& n = graph.nodes()[i];
    std::string kind(graph::op_name(n.kind));
    if (n.kind == graph::OpKind::matmul) {
      kind += n.name.find("lm_head") != std::string::npos ? " (lm_head" : " (layers";
      kind += n.backward ? ", backward)" : ", forward)";
    }
    by_kind[kind] += node_seconds[i];
    total += node_seconds[i];
  }
  if (other_seconds > 0) by_kind["optimizer (norm, clip, AdamW)"] = other_seconds;
  std::string out;
  char line[200];
  for (const auto& [kind, secs] : by_kind) {
    std::snprintf(line, sizeof line, "  %-36s %9.3f ms/step  %5.1f%%\n", kind.c_str(), secs * 1e3 / steps,
                  100.0 * secs / total);
    out += line;
  }

  // The same time by call signature (op, pass, shapes), heaviest first, with
  // the rate each reaches: what to compare against the GEMM and HBM ceilings.
  struct Signature {
    double seconds = 0;
    int nodes = 0;
    double flops = 0;  // matmul only
    double bytes = 0;  // every input and output, read or written once
  };
  std::map<std::string, Signature> by_call;
  for (size_t i = 0; i < node_seconds.size(); ++i) {
    const graph::Node& n = graph.nodes()[i];
    std::string key = std::string(graph::op_name(n.kind)) + (n.backward ? " bwd " : " fwd ");
    double bytes = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const graph::ValueInfo& v = graph.value(n.inputs[k]);
      if (k) key += ',';
      key += v.shape.str();
      bytes += static_cast<double>(v.bytes());
    }
    for (const graph::Value o : n.outputs) bytes += static_cast<double>(graph.value(o).bytes());
    if (n.kind == graph::OpKind::matmul) {
      key += std::string(n.attrs.trans_a ? " Aᵀ" : "") + (n.attrs.trans_b ? " Bᵀ" : "") + (n.attrs.accumulate ? " +=" : "");
    }
    Signature& s = by_call[key];
    s.seconds += node_seconds[i];
    s.nodes += 1;
    s.bytes += bytes;
    if (n.kind == graph::OpKind::matmul) s.flops += graph::matmul_dims(graph, n).flops();
  }
  std::vector<std::pair<std::string, Signature>> heaviest(by_call.begin(), by_call.end());
  std::sort(heaviest.begin(), heaviest.end(), [](const auto& x, const auto& y) { return x.second.seconds > y.second.seconds; });
  if (heaviest.size() > 30) heaviest.resize(30);
  out += "by call (heaviest first):\n";
  for (const auto& [key, s] : heaviest) {
    if (s.seconds <= 0) continue;
    const double rate = s.flops > 0 ? s.flops / s.seconds / 1e12 : s.bytes / s.seconds / 1e9;
    std::snprintf(line, sizeof line, "  %8.3f ms/step  %3d× %7.1f %s  %s\n", s.seconds * 1e3 / steps, s.nodes,
                  rate, s.flops > 0 ? "TFLOP/s" : "GB/s   ", key.c_str());
    out += line;
  }
  return out;
}

size_t micro_batch_tokens(const EngineOptions& options, std::span<const int32_t> inputs,
                          std::span<const int32_t> targets, int64_t micro_batches) {
  const auto n = static_cast<size_t>(options.batch * options.seq);
  SPW_CHECK(inputs.size() == n * static_cast<size_t>(micro_batches) && targets.size() == inputs.size(),
            "train step", "got ", inputs.size(), " tokens for ", micro_batches, " micro-batches of ", n);
  return n;
}

std::unique_ptr<Engine> make_cpu_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options) {
  return std::make_unique<CpuEngine>(weights, optimizer, options);
}

std::unique_ptr<Engine> make_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options) {
#ifdef SPILLWAY_HAS_CUDA
  if (options.device == DeviceChoice::cuda || (options.device == DeviceChoice::automatic && cuda_device_count() > 0)) {
    // Recomputation is the planned engine's; bf16 moments both engines'.
    const MemoryConfig& m = options.memory;
    bool offload = m.offload == OffloadMode::on || m.offload == OffloadMode::stream ||
                   m.recompute != graph::RecomputePolicy::none;
    if (m.offload == OffloadMode::automatic && !offload) {
      const uint64_t budget = m.device_mem ? m.device_mem : cuda_default_device_budget(0);
      offload = !plan::fits_on_device(weights.config(), options.batch, options.seq, budget);
      if (offload) log_info("the training state does not fit " + format_bytes(budget) + " of GPU memory: planning offload");
    }
    return offload ? make_cuda_offload_engine(weights, optimizer, options) : make_cuda_engine(weights, optimizer, options);
  }
#else
  SPW_CHECK(options.device != DeviceChoice::cuda, "--device", "this spillway was built without CUDA (SPILLWAY_CUDA=OFF)");
#endif
  SPW_CHECK(options.memory.recompute == graph::RecomputePolicy::none, "--recompute",
            "recomputation is a feature of the planned GPU engine");
  SPW_CHECK(!options.memory.bf16_moments, "--bf16-moments", "bf16 AdamW moments are a feature of the GPU engines; "
            "the CPU engine keeps fp32 moments");
  return make_cpu_engine(weights, optimizer, options);
}

}  // namespace spillway::train
