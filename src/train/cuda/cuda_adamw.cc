#include "train/cuda/cuda_adamw.h"

#include <algorithm>

#include "device/cuda/cuda_stream.h"
#include "ops/adamw.h"

namespace spillway::train {

CudaAdamW::CudaAdamW(CudaTrainingState& state, Device& device)
    : state_(state), device_(device), staging_(state.largest_tensor()) {
  if (state_.optimizer_on_device()) return;
  MemorySpace& mem = device_.device_memory();
  const auto chunk = static_cast<uint64_t>(staging_.chunk);
  auto take = [&](uint64_t bytes, const char* what) {
    owned_.push_back(mem.allocate(bytes, what));
    return owned_.back();
  };
  slots_.resize(OptimizerStaging::kSlots);
  for (Slot& slot : slots_) {
    slot.remainder = static_cast<uint16_t*>(take(chunk * 2, "optimizer staging (master's low half)"));
    slot.m = static_cast<float*>(take(chunk * 4, "optimizer staging (m)"));
    slot.v = static_cast<float*>(take(chunk * 4, "optimizer staging (v)"));
    slot.grad = static_cast<float*>(take(chunk * 4, "optimizer staging (gradient)"));
    slot.working = static_cast<bf16*>(take(chunk * 2, "optimizer staging (bf16)"));
    slot.loaded = device_.new_event();
    slot.updated = device_.new_event();
    slot.free = device_.new_event();
  }
}

CudaAdamW::~CudaAdamW() {
  for (void* p : owned_) device_.device_memory().free(p);
}

void CudaAdamW::update(const AdamW& adamw, double lr, double grad_scale) {
  if (state_.optimizer_on_device()) {
    update_in_place(adamw, lr, grad_scale);
  } else {
    update_streamed(adamw, lr, grad_scale);
  }
}

// Every element of the share the masters' rest and moments hold (the whole
// layout, or this rank's part): weight-decayed stacks, then the rest.
void CudaAdamW::update_in_place(const AdamW& adamw, double lr, double grad_scale) {
  const auto& a = state_.device_arrays();
  cudaStream_t stream = as_cuda_stream(device_.stream(StreamKind::compute)).handle();
  auto update = [&](uint64_t first, uint64_t end, bool matrix) {
    if (first >= end) return;
    const ops::AdamWHyper hp = adamw.hyper(lr, grad_scale, matrix);
    const auto count = static_cast<int64_t>(end - first);
    if (state_.bf16_moments()) {
      ops::adamw_update_split_bf16_moments_cuda(a.working_share + first, a.remainder + first, a.grads_share + first,
                                                static_cast<bf16*>(a.m) + first, static_cast<bf16*>(a.v) + first,
                                                count, hp, stream);
    } else {
      ops::adamw_update_split_cuda(a.working_share + first, a.remainder + first, a.grads_share + first,
                                   static_cast<float*>(a.m) + first, static_cast<float*>(a.v) + first, count, hp,
                                   stream);
    }
  };
  update(0, a.decayed_share, /*matrix=*/true);
  update(a.decayed_share, a.share_elements, /*matrix=*/false);
  device_.stream(StreamKind::compute).synchronize();
}

// A slot is reused only after the device->host stream has finished with it.
void CudaAdamW::update_streamed(const AdamW& adamw, double lr, double grad_scale) {
  Stream& h2d = device_.stream(StreamKind::h2d);
  Stream& compute = device_.stream(StreamKind::compute);
  Stream& d2h = device_.stream(StreamKind::d2h);
  cudaStream_t kernels = as_cuda_stream(compute).handle();
  const bool working_at_home = !state_.weights_on_device();
  int64_t k = 0;
  for (size_t i = 0; i < state_.tensors().size(); ++i) {
    const CudaTrainingState::Tensor& t = state_.tensors()[i];
    for (int64_t off = 0; off < t.n; off += staging_.chunk) {
      const int64_t len = std::min(staging_.chunk, t.n - off);
      Slot& slot = slots_[static_cast<size_t>(k % OptimizerStaging::kSlots)];
      if (k >= OptimizerStaging::kSlots) h2d.wait(*slot.free);
      const size_t halves = static_cast<size_t>(len) * 2;
      device_.copy_async(slot.remainder, t.remainder + off, halves, h2d);
      if (working_at_home) device_.copy_async(slot.working, t.working + off, halves, h2d);
      state_.copy_moment(i, 0, off, len, slot.m, CudaTrainingState::Towards::device, h2d);
      state_.copy_moment(i, 1, off, len, slot.v, CudaTrainingState::Towards::device, h2d);
      if (!t.grad_on_device) device_.copy_async(slot.grad, t.grad + off, 2 * halves, h2d);
      h2d.record(*slot.loaded);
      compute.wait(*slot.loaded);
      const ops::AdamWHyper hp = adamw.hyper(lr, grad_scale, t.decay);
      bf16* working = working_at_home ? slot.working : t.working + off;
      const float* grad = t.grad_on_device ? t.grad + off : slot.grad;
      if (state_.bf16_moments()) {
        ops::adamw_update_split_bf16_moments_cuda(working, slot.remainder, grad, reinterpret_cast<bf16*>(slot.m),
                                                  reinterpret_cast<bf16*>(slot.v), len, hp, kernels);
      } else {
        ops::adamw_update_split_cuda(working, slot.remainder, grad, slot.m, slot.v, len, hp, kernels);
      }
      compute.record(*slot.updated);
      d2h.wait(*slot.updated);
      device_.copy_async(t.remainder + off, slot.remainder, halves, d2h);
      state_.copy_moment(i, 0, off, len, slot.m, CudaTrainingState::Towards::home, d2h);
      state_.copy_moment(i, 1, off, len, slot.v, CudaTrainingState::Towards::home, d2h);
      if (working_at_home) device_.copy_async(t.working + off, slot.working, halves, d2h);
      d2h.record(*slot.free);
      ++k;
    }
  }
  for (Stream* s : {&h2d, &compute, &d2h}) s->synchronize();
}

}  // namespace spillway::train
