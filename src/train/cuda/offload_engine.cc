// The planned GPU engine, for training state larger than the device.
//
// Home of the state is host memory: the fp32 master weights as the bf16
// working copy plus the engine's pinned 16-bit remainders
// (ops/master_split.h; 2 bytes a parameter each way through PCIe instead of
// 4), and the caller's own fp32 AdamW moments, pinned where they lie (no
// second copy of tens of gigabytes), or with bf16 moments the engine's own
// pinned bf16 arrays. The
// step graph runs under a plan (plan/training_plan.h) on three streams: bf16
// working weights and fp32 gradient sums stay on the device when the plan
// says they fit; otherwise the weights are loaded for the stretches that use
// them, and each gradient's running sum is loaded just before the node that
// adds to it and goes back home right after; activations go home and come
// back where the budget needs it. The optimizer streams the masters'
// remainders and the moments (and the working copy, where it lives at home)
// through the GPU in chunks, three chunks in flight (one loading, one
// updating, one going home), and runs the same AdamW kernel as the
// all-on-device engine. The caller's fp32 master arrays are read at the
// start and written by sync_to_host.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "base/log.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_pool.h"
#include "exec/cuda/cuda_node_runner.h"
#include "exec/cuda/cuda_planned_executor.h"
#include "graph/fuse_step.h"
#include "model/llama_graph.h"
#include "ops/adamw.h"
#include "ops/master_split.h"
#include "ops/grad_norm.h"
#include "plan/timeline_svg.h"
#include "plan/training_plan.h"
#include "train/cuda/cuda_engine_common.h"
#include "train/engine.h"
#include "train/optimizer.h"

namespace spillway::train {

namespace {

// Host memory the OS reports as available, from /proc/meminfo.
uint64_t available_host_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 16ull << 30;
}

// Pins the caller's vectors in place. cudaHostRegister works on whole pages,
// and small vectors share pages, so the page-rounded ranges are merged first
// and each merged range is registered once.
class PinnedRanges {
 public:
  void add(const void* p, size_t bytes) {
    const auto page = static_cast<uintptr_t>(4096);
    const auto begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
    const auto end = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) & ~(page - 1);
    ranges_.push_back({begin, end});
  }
  void pin() {
    std::sort(ranges_.begin(), ranges_.end());
    std::vector<std::pair<uintptr_t, uintptr_t>> merged;
    for (auto r : ranges_) {
      if (!merged.empty() && r.first <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    for (auto r : merged) {
      SPW_CUDA(cudaHostRegister(reinterpret_cast<void*>(r.first), r.second - r.first, cudaHostRegisterDefault));
      pinned_.push_back(reinterpret_cast<void*>(r.first));
    }
  }
  ~PinnedRanges() {
    for (void* p : pinned_) SPW_CUDA_WARN(cudaHostUnregister(p));
  }

 private:
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges_;
  std::vector<void*> pinned_;
};

// Pinned host memory of its own pages, for the engine's copies of the
// working copies through host memory. A pageable buffer could start on a
// page PinnedRanges registered (a page it shares with one of the caller's
// vectors) and run past it, and CUDA refuses such a copy as an invalid
// argument.
class PinnedStaging {
 public:
  explicit PinnedStaging(int64_t elements) {
    SPW_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&data_), static_cast<size_t>(elements) * 2, cudaHostAllocDefault));
  }
  ~PinnedStaging() { SPW_CUDA_WARN(cudaFreeHost(data_)); }
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  bf16* data() const { return data_; }

 private:
  bf16* data_ = nullptr;
};

// A forward-only program for evaluation, planned like the training step.
struct EvalProgram {
  graph::Graph graph;
  model::LlamaGraph model;
  std::unique_ptr<exec::CudaNodeRunner> runner;
  std::unique_ptr<exec::CudaPlannedExecutor> executor;
};

class CudaOffloadEngine final : public Engine {
 public:
  CudaOffloadEngine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& o)
      : weights_(weights), optimizer_(optimizer), options_(o) {
    device_ = open_cuda_device(o, 64ull << 20);
    compute_ = as_cuda_stream(device_->stream(StreamKind::compute)).handle();
    h2d_ = as_cuda_stream(device_->stream(StreamKind::h2d)).handle();
    d2h_ = as_cuda_stream(device_->stream(StreamKind::d2h)).handle();
    name_ = cuda_engine_name(0);
    if (optimizer_.m.tensors().empty() && !o.memory.bf16_moments) optimizer_ = AdamW(weights_.config());
    MemorySpace& mem = device_->device_memory();

    // The step graph first: its runners size the workspaces the plan must
    // leave room for.
    plan::TrainingPlanRequest req;
    req.config = weights_.config();
    req.batch = o.batch;
    req.seq = o.seq;
    req.micro_batches = std::max<int64_t>(1, o.micro_batches);
    req.device_budget = mem.budget();
    req.host_budget = o.memory.host_mem ? o.memory.host_mem : static_cast<uint64_t>(0.9 * static_cast<double>(available_host_bytes()));
    req.rates = plan::h100_rates();
    req.stream_weights = o.memory.offload == OffloadMode::stream;
    req.bf16_moments = o.memory.bf16_moments;
    req.recompute = o.memory.recompute;
    req.fused_projections = train::fused_projections(o, /*planned_engine=*/true);
    plan_ = plan::training_graph(req);
    runner_ = std::make_unique<exec::CudaNodeRunner>(plan_->graph, mem, compute_, o.kernels.deterministic,
                                                       o.kernels.matmul_candidates);
    build_eval_graph();
    eval_.runner = std::make_unique<exec::CudaNodeRunner>(eval_.graph, mem, compute_, o.kernels.deterministic,
                                                            o.kernels.matmul_candidates);
    // Optimizer chunks: at most kMaxChunk elements, no more than the largest tensor.
    for (const auto& t : weights_.tensors()) chunk_ = std::max(chunk_, t.shape.numel());
    chunk_ = std::min(chunk_, kMaxChunk);
    for (int s = 0; s < kSlots; ++s) {
      Slot& slot = slots_[s];
      const auto chunk = static_cast<uint64_t>(chunk_);
      slot.remainder = static_cast<uint16_t*>(mem.allocate(chunk * 2, "optimizer staging (master's low half)"));
      slot.m = static_cast<float*>(mem.allocate(chunk * 4, "optimizer staging (m)"));
      slot.v = static_cast<float*>(mem.allocate(chunk * 4, "optimizer staging (v)"));
      slot.grad = static_cast<float*>(mem.allocate(chunk * 4, "optimizer staging (gradient)"));
      slot.working = static_cast<bf16*>(mem.allocate(chunk * 2, "optimizer staging (bf16)"));
      for (cudaEvent_t* e : {&slot.loaded, &slot.updated, &slot.free}) {
        SPW_CUDA(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
      }
    }
    const size_t n_params = weights_.tensors().size();
    norm_workspace_ = mem.allocate(ops::sum_of_squares_workspace_bytes() + 8 * n_params, "gradient norm");
    norm_parts_ = reinterpret_cast<double*>(static_cast<char*>(norm_workspace_) + ops::sum_of_squares_workspace_bytes());
    // Arena fragmentation: keep a little of the pool out of the plan.
    req.device_reserved = mem.in_use() + mem.budget() / 100;
    plan::choose_layout(*plan_, req);
    log_info("planned step: " + plan_->layout() + "; device " + format_bytes(plan_->placement.device_peak) +
             " planned + " + format_bytes(plan_->resident_bytes) + " resident; host " +
             format_bytes(plan_->host_state_bytes) + " state + " + format_bytes(plan_->placement.host_peak) +
             " offloaded; predicted " + std::to_string(plan_->step_seconds) + " s per step");

    allocate_state();
    host_pool_ = make_cuda_pool_space("cuda:0:pinned_host", CudaPoolKind::pinned_host, 0,
                                      plan_->placement.host_peak + plan_->placement.host_peak / 8 + (64ull << 20));
    executor_ = std::make_unique<exec::CudaPlannedExecutor>(plan_->graph, plan_->placement, mem, *host_pool_, *runner_,
                                                            compute_, h2d_, d2h_);
    bind(*executor_, plan_->model, /*with_grads=*/true);
    param_of_grad_.assign(plan_->graph.values().size(), -1);
    for (size_t i = 0; i < plan_->model.parameters.size(); ++i) {
      param_of_grad_[static_cast<size_t>(plan_->grads[plan_->model.parameters[i]].id)] = static_cast<int>(i);
    }
    plan_eval();
  }

  ~CudaOffloadEngine() override {
    for (cudaStream_t s : {compute_, h2d_, d2h_}) SPW_CUDA_WARN(cudaStreamSynchronize(s));
    executor_.reset();
    eval_.executor.reset();
    for (Slot& slot : slots_) {
      for (cudaEvent_t e : {slot.loaded, slot.updated, slot.free}) SPW_CUDA_WARN(cudaEventDestroy(e));
    }
    if (host_working_) SPW_CUDA_WARN(cudaFreeHost(host_working_));
    if (host_remainders_) SPW_CUDA_WARN(cudaFreeHost(host_remainders_));
    if (host_ids_) SPW_CUDA_WARN(cudaFreeHost(host_ids_));
    if (host_moments_) SPW_CUDA_WARN(cudaFreeHost(host_moments_));
    if (host_grads_) SPW_CUDA_WARN(cudaFreeHost(host_grads_));
  }

  std::string description() const override {
    return name_ + " (planned: " + plan_->layout() + (options_.memory.bf16_moments ? "; bf16 AdamW moments" : "") +
           (options_.memory.recompute != graph::RecomputePolicy::none
                ? "; recomputation: " + std::string(enum_name(options_.memory.recompute)) : "") +
           "; " + runner_->attention_summary() + ")";
  }

  StepStats train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t micro_batches,
                       double lr) override {
    const size_t n = micro_batch_tokens(options_, inputs, targets, micro_batches);
    StepStats stats;
    if (device_grad_bytes_ > 0) SPW_CUDA(cudaMemsetAsync(grads_, 0, device_grad_bytes_, compute_));
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      // Sums at home start from zero with the step's first micro-batch.
      executor_->set_accumulators_zero(micro == 0);
      if (!plan_->all_grads_resident()) sum_squares_before_store(micro == micro_batches - 1);
      stats.loss += run(*executor_, plan_->model, inputs.subspan(micro * n, n), targets.subspan(micro * n, n)) /
                    static_cast<double>(micro_batches);
      if (profiling_) collect_profile();
    }
    const auto optimizer_start = std::chrono::steady_clock::now();
    const double grad_scale = accumulated_grad_scale(std::sqrt(sum_of_squares()), micro_batches, options_.grad_clip,
                                                     &stats.grad_norm);
    ++optimizer_.steps_taken;
    stream_optimizer(lr, grad_scale);
    host_current_ = false;
    if (profiling_) {
      optimizer_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - optimizer_start).count();
      ++profiled_steps_;
    }
    return stats;
  }

  double eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets) override {
    return run(*eval_.executor, eval_.model, inputs, targets);
  }

  // The master weights are joined from the working copies and remainders
  // into the caller's arrays; fp32 moments are the caller's own memory,
  // updated in place by every step; bf16 moments are widened into the
  // caller's fp32 ones, which are made if the caller had none.
  void sync_to_host() override {
    if (host_current_) return;
    for (cudaStream_t s : {compute_, h2d_, d2h_}) SPW_CUDA(cudaStreamSynchronize(s));
    if (!plan_->weights_resident) {
      for (const Param& p : params_) ops::join_master(p.working, p.remainder, p.master, p.n);
    } else {
      const PinnedStaging staging(chunk_);
      for_each_piece([&](const Param& p, int64_t off, int64_t len) {
        SPW_CUDA(cudaMemcpy(staging.data(), p.working + off, static_cast<size_t>(len) * 2, cudaMemcpyDeviceToHost));
        ops::join_master(staging.data(), p.remainder + off, p.master + off, len);
      });
    }
    host_current_ = true;
    if (!options_.memory.bf16_moments) return;
    if (optimizer_.m.tensors().empty()) {
      optimizer_.m = model::LlamaWeights::zeros(weights_.config());
      optimizer_.v = model::LlamaWeights::zeros(weights_.config());
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      float* m = optimizer_.m.tensors()[i].data.data();
      float* v = optimizer_.v.tensors()[i].data.data();
      const Param& p = params_[i];
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < p.n; ++j) {
        m[j] = to_float(reinterpret_cast<const bf16*>(p.m)[j]);
        v[j] = to_float(reinterpret_cast<const bf16*>(p.v)[j]);
      }
    }
  }

  uint64_t peak_device_bytes() const override { return device_->device_memory().peak(); }
  bool fused_projections() const override { return train::fused_projections(options_, /*planned_engine=*/true); }

  void set_profiling(bool on) override {
    profiling_ = on;
    executor_->set_timing(on);
  }
  std::string profile_report() const override {
    return op_time_report(plan_->graph, node_seconds_, std::max(1, profiled_steps_), optimizer_seconds_);
  }
  double predicted_step_seconds() const override { return plan_->step_seconds; }
  std::string measured_timeline_svg() const override {
    std::vector<plan::TimelineBar> bars;
    for (const auto& i : last_timeline_) {
      const bool heavy = i.label.rfind("matmul", 0) == 0 || i.label.rfind("attention", 0) == 0;
      bars.push_back({i.stream, i.start, i.end, i.label, heavy});
    }
    return plan::timeline_svg(bars, "one micro-batch on " + name_ + ", measured");
  }

 private:
  static constexpr int kSlots = 3;
  static constexpr int64_t kMaxChunk = 16ll << 20;  // elements per optimizer chunk

  struct Param {
    int64_t n = 0;
    float* master = nullptr;          // host, the caller's: read at the start, written by sync_to_host
    uint16_t* remainder = nullptr;    // pinned host: the rest of the master (ops/master_split.h)
    char *m = nullptr, *v = nullptr;  // AdamW moments at home: the caller's fp32, or the engine's pinned bf16
    bf16* working = nullptr;  // device (resident) or pinned host
    float* grad = nullptr;    // the sum of the micro-batches' gradients: device, or pinned host
    bool grad_on_device = false;
    bool decay = false;
  };
  struct Slot {
    uint16_t* remainder = nullptr;
    float *m = nullptr, *v = nullptr, *grad = nullptr;
    bf16* working = nullptr;
    cudaEvent_t loaded = nullptr, updated = nullptr, free = nullptr;
  };

  void build_eval_graph() {
    graph::Builder b(eval_.graph, DType::bf16);
    eval_.model = model::build_llama(b, weights_.config(), options_.batch, options_.seq,
                                     {.fused_projections = fused_projections()});
    eval_.graph.mark_output(eval_.model.loss);
    eval_.graph = graph::fuse_step(eval_.graph);
  }

  void allocate_state() {
    MemorySpace& mem = device_->device_memory();
    const uint64_t tokens = static_cast<uint64_t>(options_.batch * options_.seq);
    tokens_ = static_cast<int32_t*>(mem.allocate(tokens * 4, "tokens"));
    targets_ = static_cast<int32_t*>(mem.allocate(tokens * 4, "targets"));
    SPW_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host_ids_), 2 * tokens * 4, cudaHostAllocDefault));
    auto& tensors = weights_.tensors();
    // The tensors a graph parameter stacks lie back to back in each array
    // (working copies and bf16 moments; gradient sums on the device, and at
    // home), so that parameter is one matrix.
    const auto& parts = plan_->model.parameter_parts;
    std::vector<int64_t> numel;
    for (const auto& t : tensors) numel.push_back(t.shape.numel());
    std::vector<std::vector<int>> device_stacks, home_stacks;
    std::vector<bool> grad_on_device(tensors.size());
    for (size_t j = 0; j < parts.size(); ++j) {
      (plan_->grad_resident[j] ? device_stacks : home_stacks).push_back(parts[j]);
      for (int t : parts[j]) grad_on_device[static_cast<size_t>(t)] = plan_->grad_resident[j];
    }
    const std::vector<uint64_t> working_at = model::stacked_offsets(parts, numel, kStackAlign);
    const std::vector<uint64_t> device_grad_at = model::stacked_offsets(device_stacks, numel, kStackAlign);
    const std::vector<uint64_t> home_grad_at = model::stacked_offsets(home_stacks, numel, kStackAlign);
    const uint64_t working_bytes = working_at.back() * 2, host_grad_bytes = home_grad_at.back() * 4;
    device_grad_bytes_ = device_grad_at.back() * 4;
    char* working = nullptr;
    if (plan_->weights_resident) {
      working = static_cast<char*>(mem.allocate(working_bytes, "weights (bf16)"));
    } else {
      SPW_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host_working_), working_bytes, cudaHostAllocDefault));
      working = host_working_;
    }
    if (device_grad_bytes_ > 0) grads_ = static_cast<char*>(mem.allocate(device_grad_bytes_, "gradients (fp32)"));
    if (host_grad_bytes > 0) {
      // The sums of the micro-batches' gradients, at home: each micro-batch
      // loads a tensor's sum just before adding to it and sends it back.
      SPW_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host_grads_), host_grad_bytes, cudaHostAllocDefault));
    }
    if (options_.memory.bf16_moments) {
      SPW_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host_moments_), 2 * working_bytes, cudaHostAllocDefault));
    }
    SPW_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host_remainders_), weights_.numel() * 2, cudaHostAllocDefault));
    uint16_t* next_remainder = host_remainders_;
    PinnedRanges& pins = pinned_;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const uint64_t wo = working_at[i] * 2;
      Param p;
      p.n = tensors[i].shape.numel();
      p.master = tensors[i].data.data();
      p.remainder = next_remainder;
      next_remainder += p.n;
      const bool have_fp32_moments = !optimizer_.m.tensors().empty();
      float* m32 = have_fp32_moments ? optimizer_.m.tensors()[i].data.data() : nullptr;
      float* v32 = have_fp32_moments ? optimizer_.v.tensors()[i].data.data() : nullptr;
      p.m = reinterpret_cast<char*>(m32);
      p.v = reinterpret_cast<char*>(v32);
      p.decay = tensors[i].shape.rank() >= 2;
      p.working = reinterpret_cast<bf16*>(working + wo);
      if (host_moments_) {
        // Rounded from the caller's fp32 moments (a resumed run) or zero.
        p.m = host_moments_ + wo;
        p.v = host_moments_ + working_bytes + wo;
        auto* m16 = reinterpret_cast<bf16*>(p.m);
        auto* v16 = reinterpret_cast<bf16*>(p.v);
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < p.n; ++j) {
          m16[j] = have_fp32_moments ? to_bf16(m32[j]) : bf16{};
          v16[j] = have_fp32_moments ? to_bf16(v32[j]) : bf16{};
        }
      }
      p.grad_on_device = grad_on_device[i];
      p.grad = p.grad_on_device ? reinterpret_cast<float*>(grads_) + device_grad_at[i]
                                : reinterpret_cast<float*>(host_grads_) + home_grad_at[i];
      if (!host_moments_) {
        for (char* h : {p.m, p.v}) pins.add(h, static_cast<size_t>(p.n) * 4);
      }
      params_.push_back(p);
    }
    const auto pin_start = std::chrono::steady_clock::now();
    pins.pin();
    if (!host_moments_) {
      log_info("pinned " + format_bytes(weights_.numel() * 8ull) + " of moments in place in " +
               std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - pin_start).count()) +
               " s");
    }
    // The bf16 working copies and the remainders, split from the caller's masters.
    if (!plan_->weights_resident) {
      for (const Param& p : params_) ops::split_master(p.master, p.working, p.remainder, p.n);
      return;
    }
    const PinnedStaging staging(chunk_);
    for_each_piece([&](const Param& p, int64_t off, int64_t len) {
      ops::split_master(p.master + off, staging.data(), p.remainder + off, len);
      SPW_CUDA(cudaMemcpy(p.working + off, staging.data(), static_cast<size_t>(len) * 2, cudaMemcpyHostToDevice));
    });
  }

  // Runs `body(param, offset, length)` over every parameter in pieces of at
  // most chunk_ elements, in order.
  template <typename Body>
  void for_each_piece(Body body) const {
    for (const Param& p : params_) {
      for (int64_t off = 0; off < p.n; off += chunk_) body(p, off, std::min(chunk_, p.n - off));
    }
  }

  // Runs `body(param, offset, length, slot)` over every parameter in chunks,
  // rotating through the staging slots: a slot is reused only after the
  // device->host stream has finished with it.
  template <typename Body>
  void for_each_chunk(Body body) {
    int64_t k = 0;
    for_each_piece([&](const Param& p, int64_t off, int64_t len) {
      Slot& slot = slots_[k % kSlots];
      if (k >= kSlots) SPW_CUDA(cudaStreamWaitEvent(h2d_, slot.free));
      body(p, off, len, slot);
      SPW_CUDA(cudaEventRecord(slot.free, d2h_));
      ++k;
    });
    for (cudaStream_t s : {h2d_, compute_, d2h_}) SPW_CUDA(cudaStreamSynchronize(s));
  }

  void stream_optimizer(double lr, double grad_scale) {
    // Moments at home are fp32 or bf16; a gradient sum is on the device or
    // at home too (Param::grad), and then comes up with the chunk; so does
    // the working copy where it lives at home, since the master is joined
    // from it.
    const size_t moment_size = host_moments_ ? 2 : 4;
    const bool working_at_home = !plan_->weights_resident;
    for_each_chunk([&](const Param& p, int64_t off, int64_t len, Slot& slot) {
      const size_t halves = static_cast<size_t>(len) * 2;
      const size_t moment_bytes = static_cast<size_t>(len) * moment_size;
      const size_t moment_off = static_cast<size_t>(off) * moment_size;
      SPW_CUDA(cudaMemcpyAsync(slot.remainder, p.remainder + off, halves, cudaMemcpyHostToDevice, h2d_));
      if (working_at_home) {
        SPW_CUDA(cudaMemcpyAsync(slot.working, p.working + off, halves, cudaMemcpyHostToDevice, h2d_));
      }
      SPW_CUDA(cudaMemcpyAsync(slot.m, p.m + moment_off, moment_bytes, cudaMemcpyHostToDevice, h2d_));
      SPW_CUDA(cudaMemcpyAsync(slot.v, p.v + moment_off, moment_bytes, cudaMemcpyHostToDevice, h2d_));
      if (!p.grad_on_device) {
        SPW_CUDA(cudaMemcpyAsync(slot.grad, p.grad + off, 2 * halves, cudaMemcpyHostToDevice, h2d_));
      }
      SPW_CUDA(cudaEventRecord(slot.loaded, h2d_));
      SPW_CUDA(cudaStreamWaitEvent(compute_, slot.loaded));
      const ops::AdamWHyper h = optimizer_.hyper(lr, grad_scale, p.decay);
      bf16* working = working_at_home ? slot.working : p.working + off;
      const float* grad = p.grad_on_device ? p.grad + off : slot.grad;
      if (host_moments_) {
        ops::adamw_update_split_bf16_moments_cuda(working, slot.remainder, grad, reinterpret_cast<bf16*>(slot.m),
                                                  reinterpret_cast<bf16*>(slot.v), len, h, compute_);
      } else {
        ops::adamw_update_split_cuda(working, slot.remainder, grad, slot.m, slot.v, len, h, compute_);
      }
      SPW_CUDA(cudaEventRecord(slot.updated, compute_));
      SPW_CUDA(cudaStreamWaitEvent(d2h_, slot.updated));
      SPW_CUDA(cudaMemcpyAsync(p.remainder + off, slot.remainder, halves, cudaMemcpyDeviceToHost, d2h_));
      SPW_CUDA(cudaMemcpyAsync(p.m + moment_off, slot.m, moment_bytes, cudaMemcpyDeviceToHost, d2h_));
      SPW_CUDA(cudaMemcpyAsync(p.v + moment_off, slot.v, moment_bytes, cudaMemcpyDeviceToHost, d2h_));
      if (working_at_home) {
        SPW_CUDA(cudaMemcpyAsync(p.working + off, slot.working, halves, cudaMemcpyDeviceToHost, d2h_));
      }
    });
  }

  // The last micro-batch leaves each gradient sum final on the device just
  // before it goes home: its squares are summed there, one part per tensor,
  // instead of reading every sum back from host memory after the step.
  void sum_squares_before_store(bool on) {
    norm_parts_taken_ = 0;
    if (!on) {
      executor_->set_before_store(nullptr);
      return;
    }
    executor_->set_before_store([this](graph::Value v, const void* sum, cudaStream_t s) {
      const int j = param_of_grad_[static_cast<size_t>(v.id)];
      SPW_CHECK(j >= 0, plan_->graph.value(v).name, "is accumulated but is no parameter's gradient");
      // A stacked sum holds its tensors back to back: one part each.
      const auto* at = static_cast<const float*>(sum);
      for (int t : plan_->model.parameter_parts[static_cast<size_t>(j)]) {
        const int64_t n = params_[static_cast<size_t>(t)].n;
        ops::sum_of_squares_cuda(at, n, norm_parts_ + t, false, norm_workspace_, s);
        at += n;
        ++norm_parts_taken_;
      }
    });
  }

  // One part per tensor, added in parameter order: the same number whether
  // a sum stays on the device (its part is taken now) or went home (taken
  // before its last store).
  double sum_of_squares() {
    int home = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].grad_on_device) {
        ++home;
        continue;
      }
      ops::sum_of_squares_cuda(params_[i].grad, params_[i].n, norm_parts_ + i, false, norm_workspace_, compute_);
    }
    SPW_CHECK(norm_parts_taken_ == home, "gradient norm", "summed ", norm_parts_taken_, " of ", home,
              " gradient sums before they went home");
    std::vector<double> parts(params_.size());
    SPW_CUDA(cudaMemcpyAsync(parts.data(), norm_parts_, parts.size() * sizeof(double), cudaMemcpyDeviceToHost, compute_));
    SPW_CUDA(cudaStreamSynchronize(compute_));
    double s = parts[0];
    for (size_t i = 1; i < parts.size(); ++i) s = s + parts[i];
    return s;
  }

  void bind(exec::CudaPlannedExecutor& e, const model::LlamaGraph& m, bool with_grads) {
    e.bind(m.tokens, tokens_);
    e.bind(m.targets, targets_);
    // A stacked parameter starts where its first tensor does.
    for (size_t i = 0; i < m.parameters.size(); ++i) {
      const Param& first = params_[static_cast<size_t>(m.parameter_parts[i].front())];
      e.bind(m.parameters[i], first.working);
      if (with_grads) e.bind(plan_->grads[m.parameters[i]], first.grad);
    }
  }

  // Evaluation gets its own placement in what the training step leaves: the
  // two never run at the same time.
  void plan_eval() {
    const auto& g = eval_.graph;
    std::vector<bool> resident(g.values().size(), false);
    resident[static_cast<size_t>(eval_.model.tokens.id)] = true;
    resident[static_cast<size_t>(eval_.model.targets.id)] = true;
    if (plan_->weights_resident) {
      for (graph::Value w : eval_.model.parameters) resident[static_cast<size_t>(w.id)] = true;
    }
    MemorySpace& mem = device_->device_memory();
    plan::Placement placement = plan::plan_gpu_placement(g, mem.budget() - mem.in_use() - mem.budget() / 100,
                                                         host_pool_->budget(), std::move(resident), plan::h100_rates());
    eval_.executor = std::make_unique<exec::CudaPlannedExecutor>(g, std::move(placement), mem,
                                                                 *host_pool_, *eval_.runner, compute_, h2d_, d2h_);
    bind(*eval_.executor, eval_.model, /*with_grads=*/false);
  }

  double run(exec::CudaPlannedExecutor& e, const model::LlamaGraph& m, std::span<const int32_t> inputs,
             std::span<const int32_t> targets) {
    check_token_ids(inputs, targets, weights_.config().vocab_size,
                    static_cast<size_t>(options_.batch * options_.seq));
    // Through the engine's own pinned buffer: the caller's ids may share a
    // page with the weights pinned in place (PinnedRanges rounds to pages),
    // and CUDA refuses a copy from memory that is only partly registered
    // ("invalid argument"), which is what a heap layout can make of them.
    // The previous micro-batch's copies are done: run() ends synchronized.
    std::memcpy(host_ids_, inputs.data(), inputs.size_bytes());
    std::memcpy(host_ids_ + inputs.size(), targets.data(), targets.size_bytes());
    SPW_CUDA(cudaMemcpyAsync(tokens_, host_ids_, inputs.size_bytes(), cudaMemcpyHostToDevice, compute_));
    SPW_CUDA(cudaMemcpyAsync(targets_, host_ids_ + inputs.size(), targets.size_bytes(), cudaMemcpyHostToDevice,
                             compute_));
    e.run();
    SPW_CUDA(cudaStreamSynchronize(compute_));
    float loss = 0;
    SPW_CUDA(cudaMemcpy(&loss, e.data(m.loss), sizeof loss, cudaMemcpyDefault));
    return loss;
  }

  void collect_profile() {
    last_timeline_ = executor_->timeline();
    node_seconds_.resize(plan_->graph.nodes().size());
    size_t node = 0;
    for (const auto& i : last_timeline_) {
      if (i.stream != 0) continue;
      if (node < node_seconds_.size()) node_seconds_[node] += i.end - i.start;
      ++node;
    }
  }

  model::LlamaWeights& weights_;
  AdamW& optimizer_;
  EngineOptions options_;
  std::unique_ptr<Device> device_;
  cudaStream_t compute_ = nullptr, h2d_ = nullptr, d2h_ = nullptr;
  std::string name_;
  std::unique_ptr<plan::TrainingPlan> plan_;
  std::unique_ptr<exec::CudaNodeRunner> runner_;
  EvalProgram eval_;
  int64_t chunk_ = 1;
  Slot slots_[kSlots];
  void* norm_workspace_ = nullptr;
  double* norm_parts_ = nullptr;  // by parameter: the squares of its final gradient sum (sums at home)
  int norm_parts_taken_ = 0;
  std::vector<int> param_of_grad_;  // by value id: the parameter whose gradient sum it is, or -1
  std::vector<Param> params_;
  PinnedRanges pinned_;
  char* host_working_ = nullptr;
  uint16_t* host_remainders_ = nullptr;  // every Param::remainder, one pinned allocation
  bool host_current_ = true;            // the caller's master arrays hold the engine's masters
  int32_t* host_ids_ = nullptr;  // pinned staging for a micro-batch's tokens, then its targets
  char* host_moments_ = nullptr;  // bf16 m and v, one pinned allocation
  char* host_grads_ = nullptr;    // gradient sums when they do not fit the device
  char* grads_ = nullptr;
  uint64_t device_grad_bytes_ = 0;  // the gradient sums that stay on the device, in one block
  int32_t* tokens_ = nullptr;
  int32_t* targets_ = nullptr;
  std::unique_ptr<MemorySpace> host_pool_;
  std::unique_ptr<exec::CudaPlannedExecutor> executor_;
  bool profiling_ = false;
  int profiled_steps_ = 0;
  double optimizer_seconds_ = 0;
  std::vector<double> node_seconds_;
  std::vector<exec::StreamInterval> last_timeline_;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_offload_engine(model::LlamaWeights& weights, AdamW& optimizer,
                                                 const EngineOptions& options) {
  return std::make_unique<CudaOffloadEngine>(weights, optimizer, options);
}

}  // namespace spillway::train
