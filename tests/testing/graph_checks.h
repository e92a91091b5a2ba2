// What the graph-pass tests ask of the graph a pass rewrote from another:
// a runnable order, the values it left without a producer, and value ids
// that still mean what they meant.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "graph/graph.h"

namespace spillway::testing {

inline int count_nodes(const graph::Graph& g, graph::OpKind kind) {
  int n = 0;
  for (const graph::Node& node : g.nodes()) n += node.kind == kind;
  return n;
}

// The first node of `kind`, or nullptr.
inline const graph::Node* first_node(const graph::Graph& g, graph::OpKind kind) {
  for (const graph::Node& node : g.nodes()) {
    if (node.kind == kind) return &node;
  }
  return nullptr;
}

// Every computed value a node reads is made by an earlier node. A read of a
// value nobody makes fails fatally: call it under ASSERT_NO_FATAL_FAILURE.
inline void expect_producers_first(const graph::Graph& g) {
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    for (graph::Value in : g.nodes()[i].inputs) {
      const graph::ValueInfo& info = g.value(in);
      if (info.role != graph::ValueRole::computed) continue;
      ASSERT_GE(info.producer, 0) << info.name << " is read but no longer made";
      EXPECT_LT(info.producer, static_cast<int32_t>(i)) << info.name;
    }
  }
}

// Computed values that no node makes: what a fusion leaves of the outputs
// it took over.
inline int orphans(const graph::Graph& g) {
  int n = 0;
  for (const graph::ValueInfo& v : g.values()) n += v.role == graph::ValueRole::computed && v.producer < 0;
  return n;
}

// Every value keeps its id, name, shape, dtype and marking; the outputs stay.
inline void expect_values_kept(const graph::Graph& before, const graph::Graph& after) {
  ASSERT_EQ(after.values().size(), before.values().size());
  for (size_t v = 0; v < before.values().size(); ++v) {
    const graph::ValueInfo& a = before.values()[v];
    const graph::ValueInfo& b = after.values()[v];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.shape, a.shape) << a.name;
    EXPECT_EQ(b.dtype, a.dtype) << a.name;
    EXPECT_EQ(b.accumulated, a.accumulated) << a.name;
  }
  EXPECT_EQ(after.outputs(), before.outputs());
}

}  // namespace spillway::testing
