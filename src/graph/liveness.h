// When each value of a graph is born and when it can die, and the memory
// that implies: the executor frees each value right after its last use, and
// the peak this file predicts is the peak the executor's allocator sees. A
// value whose producer may write over an input that dies there
// (graph::in_place_input) takes over that input's buffer instead of
// allocating its own.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "graph/graph.h"

namespace spillway::graph {

struct Lifetime {
  bool managed = false;    // produced by a node (inputs, parameters and accumulated values are the caller's)
  int32_t def = -1;        // producing node
  int32_t last_use = -1;   // last node that reads it; kEndOfStep for graph outputs
  int32_t takes_over = -1; // the value whose buffer it is made in (its producer's input), or -1
};

// At a node, an input's buffer passing to the node's output.
struct Handover {
  Value from, to;
};

struct Liveness {
  static constexpr int32_t kEndOfStep = INT32_MAX;

  std::vector<Lifetime> of;                 // by value id
  std::vector<std::vector<Value>> born_at;  // by node: managed values it allocates
  std::vector<std::vector<Value>> dies_at;  // by node: managed values freed after it runs
  std::vector<std::vector<Handover>> handed_over_at;  // by node: buffers its outputs take over
  std::vector<uint64_t> bytes_in_use;       // by node: managed bytes while it runs
  uint64_t peak_bytes = 0;
  int32_t peak_node = -1;
};

// What one allocation of n bytes costs in the allocator's books (its rounding),
// so the predicted peak counts bytes exactly as the allocator does.
using AllocationCost = std::function<uint64_t(uint64_t)>;

Liveness analyze_liveness(const Graph& graph, const AllocationCost& cost);

}  // namespace spillway::graph
