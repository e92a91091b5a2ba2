#include "exec/streamed_runner.h"

namespace spillway::exec {

void StreamedNodeRunner::run(const graph::Graph& graph, const graph::Node& node, const std::vector<void*>& data) {
  stream_.enqueue([this, &graph, &node, data] { inner_.run(graph, node, data); });
}

}  // namespace spillway::exec
