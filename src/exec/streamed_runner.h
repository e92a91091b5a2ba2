// A node runner whose work goes to a stream of the CPU backend: each node
// another runner would run at once is queued on the stream instead, so the
// planned executor's copies on the other streams overlap it, ordered by
// events exactly as on a GPU (exec/planned_executor.h).
#pragma once

#include "device/cpu/cpu_stream.h"
#include "exec/executor.h"

namespace spillway::exec {

class StreamedNodeRunner final : public NodeRunner {
 public:
  // `inner` runs each node, on `stream`'s thread; both outlive this runner.
  StreamedNodeRunner(NodeRunner& inner, CpuStream& stream) : inner_(inner), stream_(stream) {}
  // `data` is copied: the executor changes it while the node waits its turn.
  void run(const graph::Graph& graph, const graph::Node& node, const std::vector<void*>& data) override;
  void synchronize() override { stream_.synchronize(); }

 private:
  NodeRunner& inner_;
  CpuStream& stream_;
};

}  // namespace spillway::exec
