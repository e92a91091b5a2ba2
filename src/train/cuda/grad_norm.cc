#include "train/cuda/grad_norm.h"

#include <algorithm>

#include "base/status.h"
#include "device/cuda/cuda_stream.h"

namespace spillway::train {

CudaGradNorm::CudaGradNorm(const CudaTrainingState& state, std::vector<std::vector<int>> parts, Device& device)
    : state_(state),
      parts_(std::move(parts)),
      device_(device),
      read_back_(sizeof(double) * std::max<size_t>(1, state.tensors().size())) {
  MemorySpace& mem = device_.device_memory();
  cudaStream_t stream = as_cuda_stream(device_.stream(StreamKind::compute)).handle();
  const auto& tensors = state_.tensors();
  for (const auto& t : tensors) all_on_device_ = all_on_device_ && t.grad_on_device;
  if (all_on_device_) {
    // The gradients never move: the list is laid out once, of the parts of
    // each tensor in the share AdamW updates (all of them unless sharded).
    const auto& a = state_.device_arrays();
    std::vector<ops::SquaresTensor> list;
    for (const auto& t : tensors) {
      state_.shard_layout().for_each_mine(t.at, static_cast<uint64_t>(t.n), [&](uint64_t, uint64_t count, uint64_t at) {
        list.push_back({a.grads_share + at, static_cast<int64_t>(count)});
      });
    }
    workspace_ = mem.allocate(ops::SumOfSquaresList::device_bytes(list), "gradient norm");
    all_ = ops::SumOfSquaresList(list, workspace_, stream);
    out_ = static_cast<double*>(mem.allocate(sizeof(double), "gradient norm (sum)"));
    return;
  }
  workspace_ = mem.allocate(ops::sum_of_squares_workspace_bytes() + 8 * tensors.size(), "gradient norm");
  out_ = reinterpret_cast<double*>(static_cast<char*>(workspace_) + ops::sum_of_squares_workspace_bytes());
}

CudaGradNorm::~CudaGradNorm() {
  MemorySpace& mem = device_.device_memory();
  mem.free(workspace_);
  if (all_on_device_) mem.free(out_);
}

void CudaGradNorm::take_before_store(int parameter, const void* sum, Stream& compute) {
  SPW_CHECK(parameter >= 0 && static_cast<size_t>(parameter) < parts_.size(), "gradient norm",
            "a gradient sum of no parameter went home");
  // A stacked sum holds its tensors back to back: one part each.
  const auto* at = static_cast<const float*>(sum);
  for (int t : parts_[static_cast<size_t>(parameter)]) {
    const int64_t n = state_.tensors()[static_cast<size_t>(t)].n;
    ops::sum_of_squares_cuda(at, n, out_ + t, false, workspace_, as_cuda_stream(compute).handle());
    at += n;
    ++parts_taken_;
  }
}

double CudaGradNorm::sum_of_squares() {
  Stream& compute = device_.stream(StreamKind::compute);
  cudaStream_t stream = as_cuda_stream(compute).handle();
  const auto& tensors = state_.tensors();
  const size_t count = all_on_device_ ? 1 : tensors.size();
  if (all_on_device_) {
    ops::sum_of_squares_many_cuda(all_, out_, stream);
  } else {
    int home = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].grad_on_device) {
        ++home;
        continue;
      }
      ops::sum_of_squares_cuda(tensors[i].grad, tensors[i].n, out_ + i, false, workspace_, stream);
    }
    SPW_CHECK(parts_taken_ == home, "gradient norm", "summed ", parts_taken_, " of ", home,
              " gradient sums before they went home");
  }
  const auto* parts = read_back_.as<double>();
  device_.copy_async(read_back_.as<double>(), out_, count * sizeof(double), compute);
  compute.synchronize();
  double s = parts[0];
  for (size_t i = 1; i < count; ++i) s = s + parts[i];
  return s;
}

}  // namespace spillway::train
