// The communicators a run's collective nodes (ops/collective_op.h) go
// through, one for each dimension of the rank grid a node can name
// (NodeAttrs::group), and the stream the CPU enqueues them on.
#pragma once

#include <array>

#include "base/status.h"
#include "device/communicator.h"
#include "graph/graph.h"

namespace spillway::ops {

struct CollectiveGroups {
  static constexpr int kGroups = 4;  // dist::kDims
  std::array<Communicator*, kGroups> by_group{};
  Stream* stream = nullptr;

  // The communicator of n's group; Error naming the node where the run has
  // none (a rank graph run without its world).
  Communicator& of(const graph::Node& n) const {
    const int g = n.attrs.group;
    Communicator* c = g >= 0 && g < kGroups ? by_group[static_cast<size_t>(g)] : nullptr;
    SPW_CHECK(c != nullptr && stream != nullptr, graph::node_label(n), "spans group ", g,
              " of the rank grid, and this run has no communicator for it");
    return *c;
  }
};

}  // namespace spillway::ops
