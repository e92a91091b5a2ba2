#include "train/cuda/cuda_tensor_parallel.h"

#include <algorithm>
#include <cstring>

#include "base/status.h"
#include "model/llama_sharding.h"

namespace spillway::train {

CudaTensorParallel::CudaTensorParallel(model::LlamaWeights& weights, AdamW& optimizer,
                                       Communicator& group, Device& device)
    : group_(group), device_(device), splits_(model::llama_tensor_splits(weights.config())), optimizer_(optimizer) {
  const model::LlamaConfig& c = weights.config();
  for (const model::NamedTensor& t : weights.tensors()) shapes_.push_back(t.shape);
  pieces_ = model::take_llama_pieces(weights, c, group.rank(), group.size());
  if (!optimizer.m.tensors().empty()) {
    optimizer_.m = model::take_llama_pieces(optimizer.m, c, group.rank(), group.size());
    optimizer_.v = model::take_llama_pieces(optimizer.v, c, group.rank(), group.size());
  }
}

CudaTensorParallel::~CudaTensorParallel() {
  if (send_) device_.device_memory().free(send_);
  if (recv_) device_.device_memory().free(recv_);
}

std::vector<std::vector<int>> CudaTensorParallel::whole_parts(const std::vector<std::vector<int>>& parts) const {
  std::vector<std::vector<int>> whole;
  for (const auto& p : parts) {
    if (splits_.at(static_cast<size_t>(p.front())).placement == graph::Placement::whole) whole.push_back(p);
  }
  return whole;
}

void CudaTensorParallel::sum_whole_gradients(const CudaTrainingState& state, Stream& compute, Stream& comm,
                                             Event& ready, Event& done) {
  compute.record(ready);
  comm.wait(ready);
  for (size_t i = 0; i < splits_.size(); ++i) {
    if (splits_[i].placement != graph::Placement::whole) continue;
    const CudaTrainingState::Tensor& t = state.tensors()[i];
    SPW_CHECK(t.grad != nullptr && t.grad_on_device, "--tp", "the gradient sum of ", pieces_.tensors()[i].name,
              " is not whole on the device; tensor parallelism needs every gradient sum there");
    group_.all_reduce_sum(t.grad, static_cast<uint64_t>(t.n), DType::f32, comm);
  }
  comm.record(done);
  compute.wait(done);
  group_.wait(comm);  // bounded, where compute would wait for ever
}

void CudaTensorParallel::read_whole(CudaTrainingState& state, StatePart part, size_t i, std::span<float> out) {
  const Shape& shape = shapes_.at(i);
  SPW_CHECK(static_cast<int64_t>(out.size()) == shape.numel(), pieces_.tensors()[i].name, "holds ",
            shape.numel(), " values, not ", out.size());
  if (splits_[i].placement == graph::Placement::whole) return state.read(part, i, out);
  std::vector<float> piece(static_cast<size_t>(state.tensors()[i].n));
  state.read(part, i, piece);
  const auto ranks = static_cast<uint64_t>(group_.size());
  if (!send_) {
    send_ = device_.device_memory().allocate(kChunk * sizeof(float), "tensor-parallel gather");
    recv_ = device_.device_memory().allocate(kChunk * ranks * sizeof(float), "tensor-parallel gather");
    pinned_ = std::make_unique<PinnedBuffer>(kChunk * (ranks + 1) * sizeof(float));
  }
  Stream& comm = device_.stream(StreamKind::comm);
  float* pinned_send = pinned_->as<float>();
  float* pinned_recv = pinned_send + kChunk;
  const uint64_t n = piece.size();
  std::vector<float> gathered(n * ranks);
  for (uint64_t off = 0; off < n; off += kChunk) {
    const uint64_t c = std::min(kChunk, n - off);
    std::memcpy(pinned_send, piece.data() + off, c * sizeof(float));
    device_.copy_async(send_, pinned_send, c * sizeof(float), comm);
    group_.all_gather(send_, recv_, c, DType::f32, comm);
    device_.copy_async(pinned_recv, recv_, c * ranks * sizeof(float), comm);
    group_.wait(comm);
    for (uint64_t r = 0; r < ranks; ++r) {
      std::memcpy(gathered.data() + r * n + off, pinned_recv + r * c, c * sizeof(float));
    }
  }
  const std::vector<float> whole = graph::whole_of<float>(gathered, shape, splits_[i], group_.size());
  std::copy(whole.begin(), whole.end(), out.begin());
}

}  // namespace spillway::train
