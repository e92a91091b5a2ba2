// The rings' schedules on LLaMA step graphs, replayed node by node as the
// GPU engine issues them: every node finds the weights it reads gathered
// into their slot and not overwritten, every gradient a node writes lands
// in a slot no other region holds until its reduce-scatter is done, and the
// rings stay a few regions' size.
#include "train/ring_schedule.h"

#include <gtest/gtest.h>

#include "model/llama_config_json.h"
#include "model/llama_weights.h"
#include "train/step_plan.h"

namespace spillway::train {
namespace {

struct Case {
  std::unique_ptr<LlamaStep> step;
  StateLayout layout;
};

Case make_case(const model::LlamaConfig& c, bool fused, graph::RecomputePolicy recompute, bool backward, int ranks) {
  Case k;
  k.step = build_llama_step(c, 1, 16, fused, {.backward = backward, .recompute = recompute}, DType::bf16);
  std::vector<int64_t> numel;
  std::vector<bool> decayed_tensor;
  for (const auto& t : model::parameter_specs(c)) {
    numel.push_back(t.shape.numel());
    decayed_tensor.push_back(t.shape.rank() >= 2);
  }
  k.layout = lay_out_state(k.step->model.parameter_parts, numel, decayed_tensor, llama_region_keys(*k.step, c), ranks,
                           0, 128);
  return k;
}

std::vector<std::vector<int>> regions_read(const graph::Graph& g, const std::vector<RingRegion>& regions) {
  std::vector<int> of(g.values().size(), -1);
  for (size_t r = 0; r < regions.size(); ++r) {
    for (graph::Value v : regions[r].values) of[static_cast<size_t>(v.id)] = static_cast<int>(r);
  }
  std::vector<std::vector<int>> at(g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    for (const auto* list : {&n.inputs, &n.outputs}) {
      for (graph::Value v : *list) {
        if (of[static_cast<size_t>(v.id)] >= 0) at[i].push_back(of[static_cast<size_t>(v.id)]);
      }
    }
  }
  return at;
}

// Replays a gather schedule: a slot being filled may be read by no one
// until the node that waits for it.
void expect_gathers_serve_every_read(const graph::Graph& g, const std::vector<RingRegion>& regions,
                                     const RingSchedule& s) {
  const auto reads = regions_read(g, regions);
  std::vector<int> holds(s.slot_bytes.size(), -1), filling(s.slot_bytes.size(), -1);
  std::vector<int32_t> ready_at(s.slot_bytes.size(), -1);
  auto issue = [&](const RingSchedule::Episode& e) {
    const auto slot = static_cast<size_t>(s.slot_of_region[static_cast<size_t>(e.region)]);
    filling[slot] = e.region;
    ready_at[slot] = e.first_node;
  };
  for (const auto& e : s.episodes) {
    if (e.gather_after == RingSchedule::kAtStart) issue(e);
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    for (size_t slot = 0; slot < holds.size(); ++slot) {
      if (filling[slot] >= 0 && ready_at[slot] == static_cast<int32_t>(i)) {
        holds[slot] = filling[slot];
        filling[slot] = -1;
      }
    }
    for (int r : reads[i]) {
      const auto slot = static_cast<size_t>(s.slot_of_region[static_cast<size_t>(r)]);
      ASSERT_EQ(filling[slot], -1) << "node " << i << " reads slot " << slot << " while a gather fills it";
      ASSERT_EQ(holds[slot], r) << "node " << i << " reads region " << r << " from slot " << slot;
    }
    for (const auto& e : s.episodes) {
      if (e.gather_after == static_cast<int32_t>(i)) issue(e);
    }
  }
}

// Replays a reduce schedule: a slot holds one region from its first write
// until its reduce-scatter, which the slot's next region waits for.
void expect_reduces_keep_slots_apart(const graph::Graph& g, const std::vector<RingRegion>& regions,
                                     const RingSchedule& s) {
  const auto writes = regions_read(g, regions);
  ASSERT_EQ(s.episodes.size(), regions.size());  // one episode each
  for (size_t e = 0; e < s.episodes.size(); ++e) {
    const auto& ep = s.episodes[e];
    for (size_t i = 0; i < writes.size(); ++i) {
      for (int r : writes[i]) {
        if (r != ep.region) continue;
        EXPECT_GE(static_cast<int32_t>(i), ep.first_node);
        EXPECT_LE(static_cast<int32_t>(i), ep.last_node);
      }
    }
    if (ep.previous >= 0) {
      const auto& prev = s.episodes[static_cast<size_t>(ep.previous)];
      EXPECT_EQ(s.slot_of_region[static_cast<size_t>(prev.region)], s.slot_of_region[static_cast<size_t>(ep.region)]);
      EXPECT_LT(prev.last_node, ep.first_node);  // the reduce-scatter is issued before the next writes
    }
  }
}

TEST(RingSchedule, TrainingAndEvaluationStepsFindTheirWeightsAndKeepTheirGradients) {
  for (const char* preset : {"tiny", "llama3.2-1b"}) {
    const model::LlamaConfig c = model::preset_config(preset);
    for (bool fused : {false, true}) {
      for (auto recompute : {graph::RecomputePolicy::none, graph::RecomputePolicy::layers}) {
        for (bool backward : {true, false}) {
          if (!backward && recompute != graph::RecomputePolicy::none) continue;
          SCOPED_TRACE(std::string(preset) + (fused ? " fused" : " separate") + (backward ? " training" : " evaluation") +
                       " recompute " + std::string(graph::recompute_policy_name(recompute)));
          const Case k = make_case(c, fused, recompute, backward, 4);
          const graph::Graph& g = k.step->step.graph;
          const auto weights = ring_regions(k.layout, k.step->model.parameters, 2);
          const RingSchedule gathers = gather_schedule(g, weights);
          expect_gathers_serve_every_read(g, weights, gathers);
          uint64_t largest = 0, whole = 0;
          for (const auto& r : weights) {
            EXPECT_GE(gathers.slot_bytes[static_cast<size_t>(gathers.slot_of_region[&r - weights.data()])], r.bytes);
            largest = std::max(largest, r.bytes);
            whole += r.bytes;
          }
          // Two or three regions' room beside the small ones, not the model's.
          EXPECT_LE(gathers.bytes(), 3 * largest + whole / 16);
          if (!backward) continue;
          std::vector<graph::Value> grads;
          for (graph::Value p : k.step->model.parameters) grads.push_back(k.step->step.grads[p]);
          const auto sums = ring_regions(k.layout, grads, 4);
          const RingSchedule reduces = reduce_schedule(g, sums);
          expect_reduces_keep_slots_apart(g, sums, reduces);
          EXPECT_LT(reduces.bytes(), 2 * whole);  // fp32 sums: twice the bf16 weights' bytes when whole
        }
      }
    }
  }
}

}  // namespace
}  // namespace spillway::train
