#include "exec/run_node_cpu.h"

#include "base/status.h"
#include "graph/op_def.h"

namespace spillway::exec {

void run_node_cpu(const graph::Graph& g, const graph::Node& n, const std::vector<void*>& data,
                  const ops::CollectiveGroups* groups) {
  if (const auto collective = graph::op_def(n.kind).cpu_collective) {
    static const ops::CollectiveGroups kNone;
    return collective(g, n, data, groups ? *groups : kNone);
  }
  const auto kernel = graph::op_def(n.kind).cpu;
  SPW_CHECK(kernel != nullptr, graph::node_label(n), "has no CPU kernel");
  kernel(g, n, data);
}

}  // namespace spillway::exec
