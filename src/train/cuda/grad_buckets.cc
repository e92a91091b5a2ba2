#include "train/cuda/grad_buckets.h"

#include <algorithm>

#include "base/status.h"

namespace spillway::train {

std::vector<std::vector<GradBucket>> grad_buckets_by_node(const LlamaStep& step, const CudaTrainingState& state) {
  const graph::Graph& g = step.step.graph;
  const auto& parts = step.model.parameter_parts;
  struct Run {
    uint64_t first;
    int32_t final_at;  // the node that makes its sum final
  };
  std::vector<Run> runs;
  for (size_t j = 0; j < parts.size(); ++j) {
    const graph::Value grad = step.step.grads[step.model.parameters[j]];
    runs.push_back({state.tensors()[static_cast<size_t>(parts[j].front())].at, g.value(grad).producer});
  }
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.first < b.first; });
  const uint64_t end = state.device_arrays().elements;
  std::vector<std::vector<GradBucket>> by_node(g.nodes().size());
  for (size_t r = 0; r < runs.size();) {
    GradBucket b{.first = r == 0 ? 0 : runs[r].first, .count = 0};
    int32_t final_at = -1;
    size_t next = r;
    while (next < runs.size() && (next == r || runs[next].first - b.first < kBucketElements)) {
      final_at = std::max(final_at, runs[next].final_at);
      ++next;
    }
    b.count = (next < runs.size() ? runs[next].first : end) - b.first;
    SPW_CHECK(final_at >= 0, "data parallelism", "a gradient sum has no node that makes it");
    by_node[static_cast<size_t>(final_at)].push_back(b);
    r = next;
  }
  return by_node;
}

}  // namespace spillway::train
