// Data parallelism in the plan: sharding the optimizer's state where each
// rank then keeps its share on the device, the bytes the ranks exchange, and
// the error when sharding is demanded where it cannot be.
#include "train/step_plan.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "base/status.h"
#include "model/llama_config_json.h"
#include "plan/machine_rates.h"

namespace spillway::train {
namespace {

StepPlanRequest request(int ranks, uint64_t device_budget) {
  StepPlanRequest r;
  r.config = model::resolve_config("llama3.2-1b");
  r.batch = 1;
  r.seq = 512;
  r.micro_batches = 2;
  r.fused_projections = false;
  r.data_parallel = ranks;
  r.device_budget = device_budget;
  r.host_budget = 200ull << 30;
  r.rates = plan::rates_for_gpu("H100");
  return r;
}

// The device bytes a plan needs with the whole state on the device.
uint64_t whole_state_on_device(const PlannedStep& p) { return p.plan.resident_bytes + p.plan.placement.device_peak; }

TEST(DataParallelPlan, ShardsWhereEachRankThenKeepsItsShareOnTheDevice) {
  const PlannedStep whole = plan_data_parallel_step(request(2, 200ull << 30), StateSharding::none);
  const PlannedStep shared = plan_data_parallel_step(request(2, 200ull << 30), StateSharding::automatic);
  ASSERT_TRUE(whole.plan.all_on_device());
  ASSERT_TRUE(shared.plan.all_on_device());
  EXPECT_EQ(whole.state.state_shards, 1u);
  EXPECT_EQ(shared.state.state_shards, 2u);
  // Half the masters' rest (2 bytes) and fp32 moments (8) per element stay.
  const double saved = static_cast<double>(whole.plan.resident_bytes - shared.plan.resident_bytes);
  EXPECT_NEAR(saved, 5.0 * static_cast<double>(whole.plan.parameters), 0.001 * saved);

  // A budget between the two: sharded, everything stays; whole, the
  // optimizer's state goes home.
  const uint64_t between = (whole_state_on_device(whole) + whole_state_on_device(shared)) / 2;
  const PlannedStep chosen = plan_data_parallel_step(request(2, between), StateSharding::automatic);
  EXPECT_EQ(chosen.state.state_shards, 2u);
  EXPECT_TRUE(chosen.plan.optimizer_resident);
  const PlannedStep kept_whole = plan_data_parallel_step(request(2, between), StateSharding::none);
  EXPECT_EQ(kept_whole.state.state_shards, 1u);
  EXPECT_FALSE(kept_whole.plan.optimizer_resident);
}

TEST(DataParallelPlan, OneRankNeverShards) {
  const PlannedStep p = plan_data_parallel_step(request(1, 200ull << 30), StateSharding::optimizer);
  EXPECT_EQ(p.state.state_shards, 1u);
  EXPECT_EQ(p.plan.bytes_communicated, 0u);
  EXPECT_EQ(p.plan.communication_seconds, 0.0);
}

// Everything on the device: the fp32 sums all-reduced (two passes) under
// the last micro-batch's backward pass, and sharded, the bf16 weights
// all-gathered (one pass) after the optimizer. Offloading: the sums after
// the backward pass, reduce-scattered where sharded.
TEST(DataParallelPlan, CountsWhatEachRankSendsAndWhatTheStepWaitsFor) {
  const double rate = plan::rates_for_gpu("H100").collective_bytes;
  for (int ranks : {2, 4}) {
    const PlannedStep whole = plan_data_parallel_step(request(ranks, 200ull << 30), StateSharding::none);
    const PlannedStep shared = plan_data_parallel_step(request(ranks, 200ull << 30), StateSharding::optimizer);
    ASSERT_TRUE(whole.plan.all_on_device());
    ASSERT_TRUE(shared.plan.all_on_device());
    const double n = static_cast<double>(whole.plan.parameters), f = (ranks - 1.0) / ranks;
    EXPECT_NEAR(static_cast<double>(whole.plan.bytes_communicated), 2 * f * 4 * n, 1e-6 * n);
    EXPECT_NEAR(static_cast<double>(shared.plan.bytes_communicated), 2 * f * 4 * n + f * 2 * n, 1e-6 * n);
    // What is hidden under compute still slows it by overlap_slowdown.
    const double summing = 2 * f * 4 * n / rate,
                 hidden = std::min(summing, 2.0 / 3.0 * whole.plan.micro.step_seconds);
    EXPECT_NEAR(whole.plan.communication_seconds,
                summing - hidden + plan::rates_for_gpu("H100").overlap_slowdown * hidden, 1e-6);
    EXPECT_NEAR(shared.plan.communication_seconds - whole.plan.communication_seconds, f * 2 * n / rate, 1e-6);
    EXPECT_NEAR(whole.plan.step_seconds,
                2 * whole.plan.micro.step_seconds + whole.plan.communication_seconds + whole.plan.optimizer_seconds,
                1e-9);
    // Each rank updates its share alone.
    EXPECT_LT(shared.plan.optimizer_seconds, whole.plan.optimizer_seconds / ranks * 1.01);
  }
  // Too little device memory for every activation: the sums go after the
  // backward pass, reduce-scattered (one pass) where sharded.
  const PlannedStep roomy = plan_data_parallel_step(request(2, 200ull << 30), StateSharding::optimizer);
  const uint64_t tight = roomy.plan.resident_bytes + roomy.plan.placement.device_peak * 9 / 10;
  const PlannedStep offloading = plan_data_parallel_step(request(2, tight), StateSharding::optimizer);
  ASSERT_EQ(offloading.state.state_shards, 2u);
  ASSERT_GT(offloading.plan.placement.values_offloaded, 0);
  const double n = static_cast<double>(offloading.plan.parameters);
  EXPECT_NEAR(static_cast<double>(offloading.plan.bytes_communicated), 0.5 * 4 * n + 0.5 * 2 * n, 1e-6 * n);
  EXPECT_NEAR(offloading.plan.communication_seconds, (0.5 * 4 * n + 0.5 * 2 * n) / rate, 1e-6);
}

TEST(DataParallelPlan, DemandedShardingThatCannotBeNamesTheFlag) {
  const PlannedStep shared = plan_data_parallel_step(request(2, 200ull << 30), StateSharding::optimizer);
  const uint64_t too_small = shared.plan.resident_bytes - (1ull << 30);
  try {
    plan_data_parallel_step(request(2, too_small), StateSharding::optimizer);
    FAIL() << "a budget below the sharded state was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.thing(), "--shard optimizer");
    EXPECT_NE(std::string(e.what()).find("--shard none"), std::string::npos) << e.what();
  }
  // Automatic keeps the state whole and offloads instead.
  const PlannedStep offloaded = plan_data_parallel_step(request(2, too_small), StateSharding::automatic);
  EXPECT_EQ(offloaded.state.state_shards, 1u);
  EXPECT_FALSE(offloaded.plan.optimizer_resident);
}

StepPlanRequest eight_b(int ranks, uint64_t device_budget) {
  StepPlanRequest r = request(ranks, device_budget);
  r.config = model::resolve_config("llama3-8b");
  r.seq = 256;
  return r;
}

// ZeRO-2 keeps 1/N of the fp32 gradient sums, ZeRO-3 of the bf16 weights
// too; each holds its whole copies only in rings a few layers wide.
TEST(DataParallelPlan, ShardingTheSumsAndWeightsKeepsLessOnEachDevice) {
  const uint64_t roomy = 200ull << 30;
  const PlannedStep zero1 = plan_data_parallel_step(eight_b(4, roomy), StateSharding::optimizer);
  const PlannedStep zero2 = plan_data_parallel_step(eight_b(4, roomy), StateSharding::gradients);
  const PlannedStep zero3 = plan_data_parallel_step(eight_b(4, roomy), StateSharding::weights);
  ASSERT_TRUE(zero2.state.shard_gradients && !zero2.state.shard_weights);
  ASSERT_TRUE(zero3.state.shard_gradients && zero3.state.shard_weights);
  for (const PlannedStep* p : {&zero1, &zero2, &zero3}) ASSERT_TRUE(p->plan.all_on_device());
  const double n = static_cast<double>(zero1.plan.parameters);
  // A layer of LLaMA-3-8B is 1/37 of it; lm_head and the embedding 1/15 each.
  EXPECT_LT(static_cast<double>(zero2.state.ring_bytes), 0.2 * 4 * n);
  EXPECT_LT(static_cast<double>(zero3.state.ring_bytes - zero2.state.ring_bytes), 0.2 * 2 * n);
  // ZeRO-2 drops 3/4 of the sums, keeping a share of the weights beside them.
  const double saved2 = static_cast<double>(zero1.plan.resident_bytes) - static_cast<double>(zero2.plan.resident_bytes);
  EXPECT_NEAR(saved2, 0.75 * 4 * n - 0.25 * 2 * n - static_cast<double>(zero2.state.ring_bytes), 0.01 * n);
  const double saved3 = static_cast<double>(zero2.plan.resident_bytes) - static_cast<double>(zero3.plan.resident_bytes);
  EXPECT_NEAR(saved3, 2 * n - static_cast<double>(zero3.state.ring_bytes - zero2.state.ring_bytes), 0.01 * n);

  // Each micro-batch reduce-scatters the sums, and ZeRO-3 gathers the
  // weights twice; ZeRO-2 gathers the updated weights once a step.
  const double f = 0.75, micro = 2;
  EXPECT_NEAR(static_cast<double>(zero2.plan.bytes_communicated), micro * f * 4 * n + f * 2 * n, 1e-6 * n);
  EXPECT_NEAR(static_cast<double>(zero3.plan.bytes_communicated), micro * (f * 4 * n + 2 * f * 2 * n), 1e-6 * n);

  // Automatic: the least sharding that keeps the whole step on the device.
  EXPECT_FALSE(plan_data_parallel_step(eight_b(4, roomy), StateSharding::automatic).state.shard_gradients);
  const uint64_t need1 = whole_state_on_device(zero1), need2 = whole_state_on_device(zero2),
                 need3 = whole_state_on_device(zero3);
  ASSERT_LT(need3, need2);
  ASSERT_LT(need2, need1);
  const PlannedStep chose2 = plan_data_parallel_step(eight_b(4, need2 + (need1 - need2) / 4), StateSharding::automatic);
  EXPECT_TRUE(chose2.state.shard_gradients);
  EXPECT_FALSE(chose2.state.shard_weights);
  const PlannedStep chose3 = plan_data_parallel_step(eight_b(4, need3 + (need2 - need3) / 4), StateSharding::automatic);
  EXPECT_TRUE(chose3.state.shard_weights);
  try {
    plan_data_parallel_step(eight_b(4, need3 - (1ull << 30)), StateSharding::weights);
    FAIL() << "a budget below the sharded state was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.thing(), "--shard weights");
  }
  // Offloading the state home and sharding it on the devices contradict.
  StepPlanRequest home = eight_b(4, roomy);
  home.offload = plan::OffloadMode::on;
  try {
    plan_data_parallel_step(home, StateSharding::gradients);
    FAIL() << "--shard gradients with --offload on was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.thing(), "--shard gradients");
    EXPECT_NE(std::string(e.what()).find("--offload on"), std::string::npos) << e.what();
  }
  EXPECT_EQ(plan_data_parallel_step(home, StateSharding::automatic).state.state_shards, 1u);
}

// A rank of a tensor-parallel group plans its own step: half the weights,
// half of each token's FLOPs, and its collectives priced on the links.
TEST(TensorParallelPlan, ARankPlansItsHalfOfTheStepAndItsCollectives) {
  StepPlanRequest whole = request(1, 60ull << 30);
  StepPlanRequest split = whole;
  split.tensor_parallel = {.rank = 0, .ranks = 2, .sequence_parallel = true};
  const PlannedStep a = plan_llama_step(whole), b = plan_llama_step(split);
  EXPECT_NEAR(static_cast<double>(b.plan.parameters), a.plan.parameters / 2.0, 0.02 * a.plan.parameters);
  int collectives = 0;
  for (const graph::Node& n : b.step->step.graph.nodes()) {
    collectives += n.kind == graph::OpKind::all_gather || n.kind == graph::OpKind::reduce_scatter;
  }
  // Into and out of each layer's two regions, forward and backward, and the
  // embedding, lm_head and loss.
  EXPECT_GE(collectives, 16 * 8);
  EXPECT_LT(b.plan.micro.compute_seconds, a.plan.micro.compute_seconds);
  EXPECT_GT(b.plan.micro.compute_seconds, a.plan.micro.compute_seconds / 2);
}

// The GPU engine plans every context rank as rank 0 and runs that plan
// over its own chunks' graph: the two graphs differ in their chunks'
// offsets alone (the same nodes, values and shapes; the recomputation and
// the head's chunks the plan chose made alike), so the plan's places hold
// for both.
TEST(ContextParallelPlan, AChunksGraphDiffersFromRankZerosInItsOffsetsAlone) {
  StepPlanRequest r;
  r.config = model::resolve_config("llama3.2-1b");
  r.batch = 1;
  r.seq = 1024;
  r.context = {.rank = 0, .ranks = 4};
  r.loss_chunk_rows = 256;
  const auto planned = llama_step_of(r, false, {.backward = true, .recompute = graph::RecomputePolicy::selective});
  r.loss_chunk_rows.reset();  // what the rank's own request leaves to the plan
  const auto own = llama_step_for_context_rank(r, *planned, {.rank = 3, .ranks = 4});
  EXPECT_EQ(own->loss_chunk_rows, 256);
  EXPECT_EQ(own->recompute, graph::RecomputePolicy::selective);
  const graph::Graph &a = own->step.graph, &b = planned->step.graph;
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  ASSERT_EQ(a.values().size(), b.values().size());
  int offsets = 0;
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const graph::Node &x = a.nodes()[i], &y = b.nodes()[i];
    ASSERT_EQ(x.kind, y.kind) << i;
    EXPECT_EQ(x.inputs.size(), y.inputs.size()) << i;
    for (size_t j = 0; j < x.inputs.size() && j < y.inputs.size(); ++j) EXPECT_EQ(x.inputs[j].id, y.inputs[j].id) << i;
    if (x.attrs.pos0 == 0 && y.attrs.pos0 == 0) continue;
    // Chunks of 512: rank 3 holds chunks 3 and 4 of 8, rank 0 chunks 0 and 7.
    const bool first_chunk = x.attrs.pos0 == 3 * 512;
    EXPECT_TRUE(first_chunk || x.attrs.pos0 == 4 * 512) << i << ": " << x.attrs.pos0;
    EXPECT_EQ(y.attrs.pos0, first_chunk ? 0 : 7 * 512) << i;
    ++offsets;
  }
  for (size_t v = 0; v < a.values().size(); ++v) EXPECT_EQ(a.values()[v].shape, b.values()[v].shape) << v;
  EXPECT_GT(offsets, 0);
}

}  // namespace
}  // namespace spillway::train

namespace spillway::train {
namespace {

// The head in chunks where one micro-batch's logits would take more than a
// sixteenth of the device, each chunk's at most a sixty-fourth.
TEST(HeadChunks, ChunkedWhereTheLogitsWouldCrowdTheDevice) {
  StepPlanRequest r;
  r.config = model::resolve_config("llama3-8b");  // vocabulary 128,256: 250.5 KiB of bf16 logits a row
  r.batch = 1;
  r.device_budget = 76ull << 30;
  r.seq = 8192;  // 1.96 GiB of logits
  EXPECT_EQ(head_chunk_rows(r), 0);
  r.seq = 65536;
  EXPECT_EQ(head_chunk_rows(r), 4096);
  r.device_budget = 24ull << 30;
  r.seq = 8192;
  EXPECT_EQ(head_chunk_rows(r), 1024);
  r.tensor_parallel = {.rank = 0, .ranks = 2};  // the head split by vocabulary
  EXPECT_EQ(head_chunk_rows(r), 0);
  r.loss_chunk_rows = 300;
  EXPECT_EQ(head_chunk_rows(r), 300);
}

TEST(HeadChunks, AChunkedStepSaysSoAndItsEvaluationIsChunkedAlike) {
  StepPlanRequest r = request(1, 200ull << 30);
  r.config.tie_word_embeddings = false;  // a tied table's head stays whole in training
  r.loss_chunk_rows = 128;
  const auto train = llama_step_of(r, false, {.backward = true});
  const auto eval = llama_step_of(r, false, {.backward = false});
  EXPECT_EQ(train->loss_chunk_rows, 128);
  EXPECT_EQ(head_summary(*train), "the logits 128 rows at a time");
  for (const auto* step : {train.get(), eval.get()}) {
    const auto& nodes = step->step.graph.nodes();
    EXPECT_TRUE(std::ranges::any_of(nodes, [](const graph::Node& n) {
      return n.kind == graph::OpKind::linear_cross_entropy && n.attrs.chunk_rows == 128;
    }));
  }
  r.loss_chunk_rows = 0;
  EXPECT_EQ(head_summary(*llama_step_of(r, false, {.backward = true})), "");
}

}  // namespace
}  // namespace spillway::train
