#include "train/device_reserve.h"

#include <algorithm>

#include "ops/attention_op.h"

namespace spillway::train {

uint64_t deterministic_attention_workspace(int64_t batch, int64_t heads, int64_t queries, int64_t keys,
                                           int64_t head_dim) {
  return static_cast<uint64_t>(batch * heads * keys) * static_cast<uint64_t>(queries * 2 + head_dim * 4);
}

uint64_t estimated_kernel_workspaces(const graph::Graph& step, bool deterministic) {
  uint64_t attention = 0;
  if (deterministic) {
    for (const graph::Node& n : step.nodes()) {
      if (n.kind != graph::OpKind::attention_backward) continue;
      const ops::AttentionShape s = ops::attention_shape(step, n);
      attention = std::max(attention,
                           deterministic_attention_workspace(s.batch, s.q_heads, s.seq, s.keys(), s.head_dim));
    }
  }
  return std::max<uint64_t>(kKernelWorkspaceBytes, attention + (256ull << 20));
}

uint64_t device_reserve(uint64_t workspaces, uint64_t budget, bool communicates) {
  return workspaces + budget / 100 + (communicates ? kCommunicatorReserve : 0);
}

}  // namespace spillway::train
