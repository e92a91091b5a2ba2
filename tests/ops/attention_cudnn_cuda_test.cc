// cuDNN attention's list of plans (CudnnAttention::plan_count, plan_name,
// pin_plan): every plan in the list that builds gives, on small shapes, the
// forward and the backward (both orders) of the heuristic's first within
// bf16 rounding, into outputs poisoned first; pinning the heuristic's first
// runs the same kernel as the default path, bit for bit; and an index
// outside the list is refused. tests/ops/attention_cuda_test checks the
// default path against the CPU kernel.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/attention.h"
#include "ops/attention_cudnn.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::as_double;
using spillway::testing::bits_of;
using spillway::testing::DeviceArray;
using spillway::testing::random_bf16;
using spillway::testing::rel_error;
using spillway::testing::widen;

// Another plan sums in another order: bf16 outputs agree to their rounding.
constexpr double kBf16Tolerance = 1e-2;
// lse is fp32 all the way.
constexpr double kLseTolerance = 1e-3;

size_t q_numel(const AttentionShape& s) { return static_cast<size_t>(s.batch * s.seq * s.q_heads * s.head_dim); }
size_t kv_numel(const AttentionShape& s) { return static_cast<size_t>(s.batch * s.seq * s.kv_heads * s.head_dim); }
size_t lse_numel(const AttentionShape& s) { return static_cast<size_t>(s.batch * s.q_heads * s.seq); }

double default_scale(const AttentionShape& s) { return 1.0 / std::sqrt(static_cast<double>(s.head_dim)); }

std::string describe(const AttentionShape& s) {
  return "batch " + std::to_string(s.batch) + ", seq " + std::to_string(s.seq) + ", heads " +
         std::to_string(s.q_heads) + "/" + std::to_string(s.kv_heads) + ", head_dim " +
         std::to_string(s.head_dim);
}

// The 1B model's heads at head_dim 64 (a seq off the tile sizes), and head_dim 128.
const std::vector<AttentionShape> kShapes = {{2, 257, 32, 8, 64}, {1, 256, 16, 4, 128}};

// Inputs of one shape on the device, and the outputs of one run.
struct Problem {
  explicit Problem(const AttentionShape& s, uint64_t seed)
      : shape(s),
        scale(default_scale(s)),
        q(random_bf16(static_cast<int64_t>(q_numel(s)), seed)),
        k(random_bf16(static_cast<int64_t>(kv_numel(s)), seed + 1)),
        v(random_bf16(static_cast<int64_t>(kv_numel(s)), seed + 2)),
        dout(random_bf16(static_cast<int64_t>(q_numel(s)), seed + 3)),
        out(q_numel(s)), lse(lse_numel(s)), dq(q_numel(s)), dk(kv_numel(s)), dv(kv_numel(s)) {}

  AttentionShape shape;
  double scale;
  DeviceArray<bf16> q, k, v, dout;
  DeviceArray<bf16> out;
  DeviceArray<float> lse;
  DeviceArray<bf16> dq, dk, dv;
};

struct Forward {
  std::vector<bf16> out;
  std::vector<float> lse;
};

struct Backward {
  std::vector<bf16> dq, dk, dv;
};

// The forward with the plan `cudnn` has pinned, into poisoned out and lse,
// with a (poisoned) workspace of the size that plan asks for.
Forward run_forward(CudnnAttention& cudnn, Problem& p) {
  p.out.poison();
  p.lse.poison();
  DeviceArray<unsigned char> workspace(cudnn.workspace_bytes(p.shape, p.scale, AttentionPass::kForward));
  cudnn.forward(p.q.get(), p.k.get(), p.v.get(), p.out.get(), p.lse.get(), p.shape, p.scale,
                workspace.get(), nullptr);
  return {p.out.download(), p.lse.download()};
}

// The backward on p.out and p.lse as they stand, into poisoned gradients.
Backward run_backward(CudnnAttention& cudnn, Problem& p) {
  p.dq.poison();
  p.dk.poison();
  p.dv.poison();
  DeviceArray<unsigned char> workspace(cudnn.workspace_bytes(p.shape, p.scale, AttentionPass::kBackward));
  cudnn.backward(p.dout.get(), p.q.get(), p.k.get(), p.v.get(), p.out.get(), p.lse.get(),
                 p.dq.get(), p.dk.get(), p.dv.get(), p.shape, p.scale, workspace.get(), nullptr);
  return {p.dq.download(), p.dk.download(), p.dv.download()};
}

// Pins plan `index` for `pass`: false (and says why) where it did not build
// for this shape, as cuDNN's list may hold such plans.
bool pin(CudnnAttention& cudnn, const Problem& p, AttentionPass pass, int index) {
  cudnn.pin_plan(index);
  if (cudnn.supports(p.shape, p.scale, pass)) return true;
  try {
    cudnn.workspace_bytes(p.shape, p.scale, pass);
  } catch (const Error& e) {
    std::cout << describe(p.shape) << ": not checked: " << e.what() << "\n";
  }
  return false;
}

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU"

// Pins each plan of `pass` in turn and runs `check` on those that build;
// the heuristic's first must be one of them.
void for_each_built_plan(CudnnAttention& cudnn, const Problem& p, AttentionPass pass,
                         const std::function<void()>& check) {
  const int count = cudnn.plan_count(p.shape, p.scale, pass);
  const int heuristic = cudnn.heuristic_plan(p.shape, p.scale, pass);
  ASSERT_GT(count, 0);
  int checked = 0;
  for (int i = 0; i < count; ++i) {
    SCOPED_TRACE("plan " + std::to_string(i) + " of " + std::to_string(count) + ", " +
                 cudnn.plan_name(p.shape, p.scale, pass, i));
    if (!pin(cudnn, p, pass, i)) {
      EXPECT_NE(i, heuristic) << "the heuristic's first did not build";
      continue;
    }
    check();
    ++checked;
  }
  std::cout << describe(p.shape) << ": " << checked << " of " << count
            << (pass == AttentionPass::kForward ? " forward" : " backward") << " plans checked\n";
}

TEST(CudnnAttentionPlansTest, EveryForwardPlanMatchesTheHeuristicsFirst) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (const AttentionShape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Problem p(s, seed += 10);
    CudnnAttention cudnn(CudnnBackwardOrder::kAtomic);
    const Forward want = run_forward(cudnn, p);  // the default path
    for_each_built_plan(cudnn, p, AttentionPass::kForward, [&] {
      const Forward got = run_forward(cudnn, p);
      EXPECT_LT(rel_error(widen(got.out), as_double(widen(want.out))), kBf16Tolerance) << "out";
      EXPECT_LT(rel_error(got.lse, as_double(want.lse)), kLseTolerance) << "lse";
    });
  }
}

// Every backward plan of one order, on the default forward's out and lse.
void every_backward_plan_matches(CudnnBackwardOrder order) {
  uint64_t seed = 200;
  for (const AttentionShape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Problem p(s, seed += 10);
    CudnnAttention cudnn(order);
    run_forward(cudnn, p);
    const Backward want = run_backward(cudnn, p);
    for_each_built_plan(cudnn, p, AttentionPass::kBackward, [&] {
      const Backward got = run_backward(cudnn, p);
      EXPECT_LT(rel_error(widen(got.dq), as_double(widen(want.dq))), kBf16Tolerance) << "dq";
      EXPECT_LT(rel_error(widen(got.dk), as_double(widen(want.dk))), kBf16Tolerance) << "dk";
      EXPECT_LT(rel_error(widen(got.dv), as_double(widen(want.dv))), kBf16Tolerance) << "dv";
    });
  }
}

TEST(CudnnAttentionPlansTest, EveryAtomicBackwardPlanMatchesTheHeuristicsFirst) {
  SKIP_WITHOUT_GPU();
  every_backward_plan_matches(CudnnBackwardOrder::kAtomic);
}

TEST(CudnnAttentionPlansTest, EveryDeterministicBackwardPlanMatchesTheHeuristicsFirst) {
  SKIP_WITHOUT_GPU();
  every_backward_plan_matches(CudnnBackwardOrder::kDeterministic);
}

// The graph with every plan built runs, at heuristic_plan(), what the
// default path runs: same name, same bits (the deterministic backward is
// bitwise repeatable, so it is compared too).
TEST(CudnnAttentionPlansTest, PinningTheHeuristicsFirstRunsTheDefaultPlan) {
  SKIP_WITHOUT_GPU();
  const AttentionShape s = kShapes[0];
  Problem p(s, 300);
  CudnnAttention cudnn(CudnnBackwardOrder::kDeterministic);
  const Forward want = run_forward(cudnn, p);
  const Backward want_grads = run_backward(cudnn, p);
  for (AttentionPass pass : {AttentionPass::kForward, AttentionPass::kBackward}) {
    const int heuristic = cudnn.heuristic_plan(s, p.scale, pass);
    EXPECT_EQ(cudnn.plan_name(s, p.scale, pass, heuristic),
              cudnn.plan_name(s, p.scale, pass, CudnnAttention::kHeuristicPlan));
  }
  cudnn.pin_plan(cudnn.heuristic_plan(s, p.scale, AttentionPass::kForward));
  const Forward got = run_forward(cudnn, p);
  EXPECT_EQ(bits_of(got.out), bits_of(want.out));
  EXPECT_EQ(got.lse, want.lse);
  // The backward reads p.out and p.lse: the same bits as before.
  cudnn.pin_plan(cudnn.heuristic_plan(s, p.scale, AttentionPass::kBackward));
  const Backward got_grads = run_backward(cudnn, p);
  EXPECT_EQ(bits_of(got_grads.dq), bits_of(want_grads.dq));
  EXPECT_EQ(bits_of(got_grads.dk), bits_of(want_grads.dk));
  EXPECT_EQ(bits_of(got_grads.dv), bits_of(want_grads.dv));
  cudnn.pin_plan(CudnnAttention::kHeuristicPlan);
  EXPECT_EQ(bits_of(run_forward(cudnn, p).out), bits_of(want.out));
}

TEST(CudnnAttentionPlansTest, IndexOutsideTheListIsRefused) {
  SKIP_WITHOUT_GPU();
  const AttentionShape s = kShapes[1];
  const double scale = default_scale(s);
  CudnnAttention cudnn(CudnnBackwardOrder::kAtomic);
  const int count = cudnn.plan_count(s, scale, AttentionPass::kForward);
  ASSERT_GT(count, 0);
  EXPECT_THROW(cudnn.plan_name(s, scale, AttentionPass::kForward, count), Error);
  EXPECT_THROW(cudnn.pin_plan(-2), Error);
  cudnn.pin_plan(count);
  EXPECT_EQ(cudnn.pinned_plan(), count);
  EXPECT_FALSE(cudnn.supports(s, scale, AttentionPass::kForward));
  EXPECT_THROW(cudnn.workspace_bytes(s, scale, AttentionPass::kForward), Error);
  EXPECT_THROW(cudnn.forward(nullptr, nullptr, nullptr, nullptr, nullptr, s, scale, nullptr, nullptr),
               Error);
  cudnn.pin_plan(CudnnAttention::kHeuristicPlan);
  EXPECT_TRUE(cudnn.supports(s, scale, AttentionPass::kForward));
  // A shape cuDNN refuses has an empty list; an empty shape has no plans and needs none.
  EXPECT_EQ(cudnn.plan_count(AttentionShape{1, 16, 2, 2, 36}, 0.2, AttentionPass::kForward), 0);
  EXPECT_EQ(cudnn.plan_count(AttentionShape{0, 16, 2, 2, 64}, 0.2, AttentionPass::kForward), 0);
}

}  // namespace
}  // namespace spillway::ops
