// Pipeline and context parallelism in the plan: a rank plans its own
// graph (its stage's layers, its chunk of each sequence), the pipeline's
// step is its 1F1B slots, and a layout that cannot split the model or the
// step is refused naming the flag.
#include "train/run_plan.h"

#include <gtest/gtest.h>

#include <string>

#include "base/status.h"
#include "graph/op_def.h"

namespace spillway::train {
namespace {

RunConfig run_of(int64_t grad_accum, int64_t seq = 512) {
  RunConfig r = default_run_config(Command::plan);
  r.model.config = "llama3.2-1b";
  r.schedule.batch = 1;
  r.schedule.seq = seq;
  r.schedule.grad_accum = grad_accum;
  r.memory.device_mem = 80ull << 30;
  r.memory.host_mem = 400ull << 30;
  r.parallel.shard = StateSharding::none;
  return r;
}

RunPlan planned(RunConfig r, int gpus, int pp, int cp = 1) {
  r.parallel.pp = pp;
  r.parallel.cp = cp;
  return plan_run(r, {.gpus = gpus});
}

// The step is (m + S - 1) slots of the slowest stage, besides the gradient
// sums' exchange and the optimizer: the bubble, S - 1 of them, is the same
// whatever m, so more micro-batches take a smaller part of it.
TEST(PipelinePlan, TheStepIsTheSlotsOfTheSlowestStage) {
  for (int64_t m : {1, 2, 8}) {
    const RunPlan p = planned(run_of(m), 4, 4);
    ASSERT_TRUE(p.pipeline);
    const PipelinePricing& pp = *p.pipeline;
    const plan::TrainingPlan& q = p.plan();
    EXPECT_EQ(pp.stages.size(), 4u);
    EXPECT_EQ(pp.micro_batches, m);
    EXPECT_NEAR(q.step_seconds - q.communication_seconds - q.optimizer_seconds, (m + 3.0) * pp.slot_seconds,
                1e-9 * q.step_seconds);
    EXPECT_DOUBLE_EQ(pp.bubble, 3.0 / (m + 3.0));
    // A slot is the stage's planned micro-batch, the hidden states crossing
    // and, for every stage but the last, the forward pass run ahead (its
    // training step remakes it).
    EXPECT_EQ(pp.forward_seconds > 0, pp.slowest + 1 < 4) << "slowest stage " << pp.slowest;
    EXPECT_GT(pp.transfer_seconds, 0);
    EXPECT_NEAR(pp.slot_seconds, pp.forward_seconds + q.micro.step_seconds + pp.transfer_seconds,
                1e-12 + 1e-9 * pp.slot_seconds);
    EXPECT_EQ(pp.kept_inputs, std::min<int64_t>(3, m));
  }
  // Against one stage's time: (m + S - 1) / m of the slots' own work.
  const RunPlan two = planned(run_of(2), 4, 4), eight = planned(run_of(8), 4, 4);
  const double per_token_2 = (two.plan().step_seconds - two.plan().optimizer_seconds) / 2;
  const double per_token_8 = (eight.plan().step_seconds - eight.plan().optimizer_seconds) / 8;
  EXPECT_NEAR(per_token_2 / per_token_8, (5.0 / 2) / (11.0 / 8), 0.01);
}

// Interleaved 1F1B: two stages a rank, a slot their passes together, the
// bubble (S - 1) / V of them; with the state well inside the device the
// smaller bubble makes the step shorter.
TEST(PipelinePlan, InterleavedStagesShrinkTheBubble) {
  RunConfig r = run_of(8);
  r.parallel.virtual_stages = 2;
  const RunPlan interleaved = planned(r, 4, 4), plain = planned(run_of(8), 4, 4);
  ASSERT_TRUE(interleaved.pipeline);
  const PipelinePricing& pp = *interleaved.pipeline;
  const plan::TrainingPlan& q = interleaved.plan();
  EXPECT_EQ(pp.stages.size(), 8u);
  EXPECT_EQ(pp.chunks, 2);
  EXPECT_DOUBLE_EQ(pp.bubble, 3.0 / (2 * 8 + 3.0));
  EXPECT_NEAR(q.step_seconds - q.communication_seconds - q.optimizer_seconds, (8 + 1.5) * pp.slot_seconds,
              1e-9 * q.step_seconds);
  EXPECT_LT(q.step_seconds, plain.plan().step_seconds);
  EXPECT_GT(q.mfu, plain.plan().mfu);
}

TEST(PipelinePlan, VirtualStagesTheModelOrTheStepDoNotAllowAreRefusedNamingTheFlag) {
  auto error_of = [](RunConfig r, int gpus, int pp) {
    try {
      planned(std::move(r), gpus, pp);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  RunConfig r = run_of(8);
  r.parallel.virtual_stages = 2;
  EXPECT_EQ(error_of(r, 1, 1), "--virtual-stages: 2 stages a rank need pipeline parallelism (--pp 2 or more)");
  r.parallel.virtual_stages = 5;
  EXPECT_EQ(error_of(r, 4, 4), "--virtual-stages: 5 stages a rank over 4 ranks make 20 stages, more than the "
                               "model's 16 layers");
  r = run_of(6);
  r.parallel.virtual_stages = 2;
  EXPECT_EQ(error_of(r, 4, 4), "--grad-accum: interleaved stages take micro-batches in groups of --pp; 6 "
                               "micro-batches a pipeline are not a multiple of 4");
}

TEST(PipelinePlan, AStageHoldsLessThanTheWholeModel) {
  const RunPlan whole = planned(run_of(4), 1, 1);
  const RunPlan staged = planned(run_of(4), 4, 4);
  const plan::TrainingPlan& w = whole.plan();
  EXPECT_LT(staged.pipeline->largest_bytes, w.resident_bytes + w.placement.device_peak);
  EXPECT_LT(staged.plan().parameters, w.parameters);
}

// Each context rank takes its chunk of the sequence: its activations fall
// with C, and the keys and values are all-gathered in its graph.
TEST(ContextPlan, ARankHoldsItsChunkAndGathersKeysAndValues) {
  uint64_t last_peak = 0;
  for (int cp : {1, 2, 4}) {
    const RunPlan p = planned(run_of(4, 4096), cp, 1, cp);
    EXPECT_EQ(p.request.seq, 4096 / cp);
    int gathers = 0;
    for (const graph::Node& n : p.chosen.step->step.graph.nodes()) gathers += n.kind == graph::OpKind::all_gather;
    if (cp == 1) {
      EXPECT_EQ(gathers, 0);
    } else {
      EXPECT_GE(gathers, 2 * 16) << cp;  // keys and values in each of the 16 layers
      EXPECT_LT(p.plan().placement.device_peak, last_peak) << cp;
    }
    last_peak = p.plan().placement.device_peak;
  }
}

std::string refusal(RunConfig r, int gpus) {
  try {
    plan_run(r, {.gpus = gpus});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LayoutPlan, ALayoutThatCannotSplitIsRefusedNamingTheFlag) {
  RunConfig r = run_of(4);
  r.parallel.pp = 32;  // the model has 16 layers
  EXPECT_EQ(refusal(r, 32).rfind("--pp: 32 pipeline stages need at least as many layers", 0), 0u) << refusal(r, 32);
  r = run_of(4);
  r.parallel.cp = 2;
  r.schedule.batch = 2;
  EXPECT_EQ(refusal(r, 2).rfind("--cp: context parallelism takes one sequence a micro-batch", 0), 0u);
  r = run_of(4, 500);
  r.parallel.cp = 8;
  EXPECT_EQ(refusal(r, 8).rfind("--cp: a sequence of 500 tokens does not cut into 16 chunks (two for each of 8 ranks)", 0),
            0u);
  r = run_of(4);
  r.parallel.pp = 2;
  r.parallel.tp = 2;
  EXPECT_EQ(refusal(r, 6).rfind("--tp: 2 does not divide", 0), std::string::npos);
  EXPECT_EQ(refusal(r, 6).rfind("--pp: 2 stages of 2 GPUs each do not divide the 6 GPUs", 0), 0u) << refusal(r, 6);
  r = run_of(4);
  r.parallel.tp = 64;
  EXPECT_EQ(refusal(r, 64).rfind("--tp: 64 does not divide the model's 32 query heads", 0), 0u) << refusal(r, 64);
}

}  // namespace
}  // namespace spillway::train
