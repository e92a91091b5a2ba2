#include "train/cuda/replica_sums.h"

namespace spillway::train {

ReplicaSums::ReplicaSums(CudaTrainingState& state, Device& device, Communicator& replicas)
    : state_(state), device_(device), replicas_(replicas), ready_(device.new_event()), summed_(device.new_event()) {}

void ReplicaSums::sum_now(bool sharded) {
  Stream& compute = device_.stream(StreamKind::compute);
  Stream& comm = device_.stream(StreamKind::comm);
  compute.record(*ready_);
  comm.wait(*ready_);
  if (sharded) {
    const auto& a = state_.device_arrays();
    replicas_.reduce_scatter_sum(a.grads, a.grads_share, a.share_elements, DType::f32, comm);
  } else {
    replicas_.all_reduce_sum(state_.device_grads(), state_.device_grad_bytes() / sizeof(float), DType::f32, comm);
  }
  comm.record(*summed_);
  compute.wait(*summed_);
  replicas_.wait(comm);  // bounded, where compute would wait for ever
}

void ReplicaSums::overlap(CudaStep& train, const LlamaStep& step) {
  buckets_by_node_ = grad_buckets_by_node(step, state_);
  Stream& compute = device_.stream(StreamKind::compute);
  Stream& comm = device_.stream(StreamKind::comm);
  float* grads = state_.device_grads();
  train.set_micro_batch_hooks({.after_node =
                                   [this, &compute, &comm, grads](size_t node, bool) {
                                     const std::vector<GradBucket>& ready = buckets_by_node_[node];
                                     if (ready.empty()) return;
                                     compute.record(*ready_);
                                     comm.wait(*ready_);
                                     for (const GradBucket& b : ready) {
                                       replicas_.all_reduce_sum(grads + b.first, b.count, DType::f32, comm);
                                     }
                                   },
                               .at_end =
                                   [this, &compute, &comm](bool) {
                                     comm.record(*summed_);
                                     compute.wait(*summed_);
                                   }});
  overlapped_ = true;
}

void ReplicaSums::gather_weights() {
  Stream& compute = device_.stream(StreamKind::compute);
  Stream& comm = device_.stream(StreamKind::comm);
  const auto& a = state_.device_arrays();
  compute.record(*ready_);
  comm.wait(*ready_);
  for (const ShardLayout::Region& r : state_.shard_layout().regions()) {
    replicas_.all_gather(a.working_share + r.share_at, a.working + r.first, r.piece, DType::bf16, comm);
  }
  comm.record(*summed_);
  compute.wait(*summed_);
  replicas_.wait(comm);
}

}  // namespace spillway::train
