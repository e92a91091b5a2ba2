#include "plan/placement.h"

#include <gtest/gtest.h>

#include "base/status.h"
#include "device/arena.h"
#include "device/memory_space.h"
#include "graph/autodiff.h"
#include "model/llama_graph.h"
#include "testing/llama.h"

namespace spillway::plan {
namespace {

uint64_t cost(uint64_t n) { return MemorySpace::accounted_bytes(n); }

graph::Graph training_graph() {
  model::LlamaConfig c = testing::llama_config(256, 64, 176, 4, 4, 2);
  graph::Graph g;
  graph::Builder b(g, DType::f32);
  auto m = model::build_llama(b, c, 4, 64);
  g.mark_output(m.loss);
  graph::append_backward(b, m.loss, m.parameters);
  return g;
}

TEST(Placement, PeakStaysUnderEveryBudgetDownToTheMinimum) {
  graph::Graph g = training_graph();
  const uint64_t minimum = minimum_device_budget(g, cost);
  const Placement roomy = plan_placement(g, UINT64_MAX, UINT64_MAX, cost);
  EXPECT_EQ(roomy.values_offloaded, 0);
  ASSERT_GT(roomy.device_peak, minimum);
  for (double share : {0.75, 0.5, 0.25, 0.0}) {
    const uint64_t budget = minimum + static_cast<uint64_t>(share * static_cast<double>(roomy.device_peak - minimum));
    const Placement p = plan_placement(g, budget, UINT64_MAX, cost);
    EXPECT_LE(p.device_peak, budget) << share;
    EXPECT_GT(p.values_offloaded, 0) << share;
    // Every load brings back something that was stored or is the caller's.
    EXPECT_GE(p.bytes_loaded, 0u);
  }
}

TEST(Placement, BelowTheMinimumIsRefusedNamingIt) {
  graph::Graph g = training_graph();
  const uint64_t minimum = minimum_device_budget(g, cost);
  try {
    plan_placement(g, minimum - 1, UINT64_MAX, cost);
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("--device-mem"), std::string::npos) << msg;
    EXPECT_NE(msg.find("minimum of " + format_bytes(minimum)), std::string::npos) << msg;
  }
}

TEST(Placement, HostBudgetIsAHardLimitToo) {
  graph::Graph g = training_graph();
  const uint64_t minimum = minimum_device_budget(g, cost);
  const Placement tight = plan_placement(g, minimum, UINT64_MAX, cost);
  ASSERT_GT(tight.host_peak, 0u);
  EXPECT_THROW(plan_placement(g, minimum, tight.host_peak - 1, cost), Error);
}

// The first node at or after `from` that reads or writes v.
int first_use(const graph::Graph& g, graph::Value v, size_t from) {
  for (size_t i = from; i < g.nodes().size(); ++i) {
    const auto& n = g.nodes()[i];
    for (auto x : n.inputs) if (x == v) return static_cast<int>(i);
    for (auto x : n.outputs) if (x == v) return static_cast<int>(i);
  }
  return -1;
}

TEST(Placement, ResidentValuesAreNeverMovedNorCounted) {
  graph::Graph g = training_graph();
  std::vector<bool> resident(g.values().size(), false);
  uint64_t resident_bytes = 0;
  for (auto p : g.parameters()) {
    resident[static_cast<size_t>(p.id)] = true;
    resident_bytes += cost(g.value(p).bytes());
  }
  PlacementRequest r;
  r.resident = resident;
  const Placement all = plan_placement(g, UINT64_MAX, UINT64_MAX, cost);
  const Placement p = plan_placement(g, r, cost);
  EXPECT_LT(p.device_peak, all.device_peak);
  EXPECT_GE(p.device_peak + resident_bytes, all.device_peak);
  EXPECT_LE(minimum_device_budget(g, cost, resident), minimum_device_budget(g, cost));
  for (const auto& act : p.nodes) {
    for (auto v : act.load) EXPECT_FALSE(resident[static_cast<size_t>(v.id)]) << g.value(v).name;
    for (auto v : act.drop) EXPECT_FALSE(resident[static_cast<size_t>(v.id)]) << g.value(v).name;
  }
}

TEST(Placement, PrefetchedLoadsStartEarlierAndStillFitTheBudget) {
  graph::Graph g = training_graph();
  const uint64_t minimum = minimum_device_budget(g, cost);
  const Placement roomy = plan_placement(g, UINT64_MAX, UINT64_MAX, cost);
  const uint64_t budget = minimum + (roomy.device_peak - minimum) / 3;
  PlacementRequest r;
  r.device_budget = budget;
  r.node_seconds.assign(g.nodes().size(), 1e-3);
  r.h2d_bytes_per_second = 100e6;  // a load of ~200 KB takes two nodes
  const Placement p = plan_placement(g, r, cost);
  EXPECT_LE(p.device_peak, budget);
  int early = 0;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    for (auto v : p.nodes[i].load) {
      const int use = first_use(g, v, i);
      ASSERT_GE(use, static_cast<int>(i)) << g.value(v).name << " loaded after every use";
      if (use > static_cast<int>(i)) ++early;
    }
  }
  EXPECT_GT(early, 0);
  // Holding stored values until their copies are done keeps the budget too.
  r.d2h_bytes_per_second = 100e6;
  const Placement held = plan_placement(g, r, cost);
  EXPECT_LE(held.device_peak, budget);
  EXPECT_GT(held.bytes_stored, 0u);
  // The same step without node times loads everything at its node.
  const Placement late = plan_placement(g, budget, UINT64_MAX, cost);
  for (size_t i = 0; i < late.nodes.size(); ++i) {
    for (auto v : late.nodes[i].load) EXPECT_EQ(first_use(g, v, i), static_cast<int>(i));
  }
}

// When the copy stream is the bottleneck, loading everything as late as the
// stream allows would hold too much at once. Loads that do not fit so
// early start later (compute may wait for them); the others still prefetch,
// rather than every load falling back to its node.
TEST(Placement, LoadsThatDoNotFitEarlyStartLaterWhileOthersStillPrefetch) {
  graph::Graph g = training_graph();
  const uint64_t minimum = minimum_device_budget(g, cost);
  PlacementRequest r;
  r.device_budget = minimum + minimum / 4;
  r.node_seconds.assign(g.nodes().size(), 1e-3);
  r.h2d_bytes_per_second = 10e6;  // a load of ~200 KB takes twenty nodes
  r.d2h_bytes_per_second = 10e6;
  const Placement p = plan_placement(g, r, cost);
  EXPECT_LE(p.device_peak, r.device_budget);
  int early = 0, at_node = 0;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    for (auto v : p.nodes[i].load) (first_use(g, v, i) > static_cast<int>(i) ? early : at_node) += 1;
  }
  EXPECT_GT(early, 0);
  EXPECT_GT(at_node, 0);
}

// The CUDA pool is a best-fit arena: a plan that fits in bytes but not in
// one piece would fail mid-step, so every plan must replay in an arena of
// the budget's size, allocations and frees in the executor's order.
TEST(Placement, EveryPlanReplaysInABestFitArenaOfTheBudget) {
  graph::Graph g = training_graph();
  const uint64_t minimum = minimum_device_budget(g, cost);
  const Placement roomy = plan_placement(g, UINT64_MAX, UINT64_MAX, cost);
  for (int k = 0; k <= 16; ++k) {
    const uint64_t budget = minimum + (roomy.device_peak - minimum) * static_cast<uint64_t>(k) / 16;
    PlacementRequest r;
    r.device_budget = budget;
    r.node_seconds.assign(g.nodes().size(), 1e-3);
    r.h2d_bytes_per_second = 100e6;
    r.d2h_bytes_per_second = 100e6;
    for (bool prefetch : {false, true}) {
      Placement p;
      try {
        PlacementRequest q = r;
        if (!prefetch) q.node_seconds.clear();
        q.best_fit_arena = true;
        p = plan_placement(g, q, cost);
      } catch (const Error& e) {
        // Refused before the step (naming the budget) is fine; failing in it is not.
        EXPECT_NE(std::string(e.what()).find("--device-mem"), std::string::npos) << e.what();
        EXPECT_LT(k, 4) << "a budget a quarter of the way above the minimum must place: " << e.what();
        continue;
      }
      Arena arena("replay", budget, MemorySpace::kAlignment);
      std::vector<uint64_t> at(g.values().size());
      for (const NodeActions& act : p.nodes) {
        for (const auto* list : {&act.load, &act.allocate}) {
          for (graph::Value v : *list) {
            auto offset = arena.try_allocate(g.value(v).bytes());
            ASSERT_TRUE(offset.has_value()) << g.value(v).name << " at budget " << budget;
            at[static_cast<size_t>(v.id)] = *offset;
          }
        }
        for (graph::Value v : act.drop) arena.free(at[static_cast<size_t>(v.id)]);
      }
    }
  }
}

}  // namespace
}  // namespace spillway::plan
