// What a GPU rank keeps outside the step graph, as a plan estimates it:
// cuDNN's ordered attention backward grows with queries x keys, and the
// plan refuses a long sequence whose workspace the device cannot hold,
// naming --nondeterministic.
#include "train/device_reserve.h"

#include <gtest/gtest.h>

#include "base/status.h"
#include "model/llama_config_json.h"
#include "train/run_plan.h"
#include "train/step_plan.h"

namespace spillway::train {
namespace {

std::unique_ptr<LlamaStep> step_of(int64_t seq, const model::LlamaContext& context = {}) {
  // Context parallelism keeps q, k and v apart.
  return build_llama_step(model::resolve_config("llama3-8b"), 1, seq, context.ranks == 1,
                          {.backward = true, .recompute = graph::RecomputePolicy::none}, DType::bf16, false, false,
                          {}, {}, context);
}

TEST(DeviceReserve, TheOrderedAttentionBackwardTakesAScoreMatrixAHead) {
  // The sizes cuDNN asked for on Hopper (32 heads of 128): 4 GiB and 128 MiB
  // at seq 8192; a rank's 32,768 queries over 131,072 keys (were they one
  // chunk), 258 GiB.
  EXPECT_EQ(deterministic_attention_workspace(1, 32, 8192, 8192, 128), (4ull << 30) + (128ull << 20));
  EXPECT_EQ(deterministic_attention_workspace(1, 32, 32768, 131072, 128), 258ull << 30);
  const auto one = step_of(8192);
  EXPECT_EQ(estimated_kernel_workspaces(one->step.graph, true), (4ull << 30) + (384ull << 20));
  EXPECT_EQ(estimated_kernel_workspaces(one->step.graph, false), kKernelWorkspaceBytes);
  // Four context ranks at 131,072 tokens: each of a rank's two chunks
  // (16,384 queries over every key) takes 130 GiB.
  const auto chunks = step_of(32768, {.rank = 3, .ranks = 4});
  EXPECT_EQ(estimated_kernel_workspaces(chunks->step.graph, true), (130ull << 30) + (256ull << 20));
  // Short sequences take the floor.
  EXPECT_EQ(estimated_kernel_workspaces(step_of(512)->step.graph, true), kKernelWorkspaceBytes);
}

TEST(DeviceReserve, AddsTheArenasSlackAndNcclsBuffersWhereTheRankCommunicates) {
  EXPECT_EQ(device_reserve(1000, 100 << 20, false), 1000 + (1 << 20));
  EXPECT_EQ(device_reserve(1000, 100 << 20, true), 1000 + (1 << 20) + kCommunicatorReserve);
}

RunConfig long_context_run(bool deterministic) {
  RunConfig r = default_run_config(Command::plan);
  r.model.config = "llama3-8b";
  r.schedule.batch = 1;
  r.schedule.seq = 131072;
  r.schedule.grad_accum = 1;
  r.memory.device_mem = 128ull << 30;
  r.memory.host_mem = 400ull << 30;
  r.parallel.cp = 4;
  r.kernels.deterministic = deterministic;
  return r;
}

TEST(DeviceReserve, APlanWhoseOrderedAttentionCannotFitSaysSo) {
  try {
    plan_run(long_context_run(true), {.gpus = 4});
    FAIL() << "planned a 130 GiB workspace into 128 GiB";
  } catch (const Error& e) {
    EXPECT_EQ(e.thing(), "--device-mem");
    EXPECT_NE(e.problem().find("deterministic attention backward alone takes 130.00 GiB"), std::string::npos)
        << e.what();
    EXPECT_NE(e.problem().find("--nondeterministic"), std::string::npos) << e.what();
  }
  const RunPlan atomic = plan_run(long_context_run(false), {.gpus = 4});
  EXPECT_EQ(atomic.reserved, device_reserve(kKernelWorkspaceBytes, 128ull << 30, true));
}

}  // namespace
}  // namespace spillway::train
