// Every registered op and fused form (testing/op_sweep_cases.h) on the CPU:
// the f32 kernels against the same graph in f64; the gradient autodiff
// builds from the ops' backward rules against central finite differences
// in f64; each fused form against the graph it was fused from. The GPU half
// is op_sweep_cuda_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "graph/autodiff.h"
#include "graph/op_def.h"
#include "ops/cross_entropy_op.h"
#include "ops/matmul_op.h"
#include "testing/numeric.h"
#include "testing/op_sweep.h"
#include "testing/op_sweep_cases.h"

namespace spillway::testing {
namespace {

using graph::Fused;
using graph::OpKind;
using graph::Value;

const std::vector<SweepCase>& cases() {
  static const std::vector<SweepCase> all = sweep_cases();
  return all;
}

std::vector<SweepCase> cases_where(bool (*keep)(const SweepCase&)) {
  std::vector<SweepCase> out;
  for (const SweepCase& c : cases()) {
    if (keep(c)) out.push_back(c);
  }
  return out;
}

std::string name_of(const ::testing::TestParamInfo<SweepCase>& info) { return info.param.label; }

// The graph a gradient check runs: the case's graph, a scalar loss made from
// its first output, and the backward to every float input. An output of more
// than one element goes through a random projection and a cross-entropy,
// whose gradient reaches every direction of it.
struct GradientGraph {
  SweepGraph s;
  Value loss;
  graph::Gradients grads;
};

GradientGraph gradient_graph(const SweepCase& c, uint64_t seed) {
  GradientGraph gg;
  gg.s = build_sweep_graph(c, DType::f64, seed, false);
  graph::Builder b(gg.s.graph, DType::f64);
  SweepInputs head(b, seed + 500);
  gg.loss = gg.s.outputs[0];
  // A copy: adding the head's values reallocates the graph's value list
  // (ASan found the reference read after it had moved).
  const Shape y = gg.s.graph.value(gg.loss).shape;
  if (y.numel() != 1) {
    const auto classes = static_cast<int32_t>(y.last() + 3);
    const Value w = head.activation("head.w", Shape{y.last(), classes});
    const Value logits = ops::matmul(b, gg.loss, w, false, false, "head");
    gg.loss = ops::cross_entropy(b, logits, head.ids("head.targets", Shape{y.rows()}, classes), "head.loss");
  }
  gg.s.graph.mark_output(gg.loss);
  std::vector<Value> wrt;
  for (const InputSpec& in : gg.s.inputs) {
    if (in.differentiable()) wrt.push_back(in.value);
  }
  gg.grads = graph::append_backward(b, gg.loss, wrt);
  for (const InputSpec& in : head.specs()) gg.s.inputs.push_back(in);
  return gg;
}

// Collectives need ranks: tests/model/llama_sharding_test.cc runs them, and
// their gradients, in every rank graph of LLaMA it checks against one
// device's float64 step (and its _cuda_test on GPUs).
bool is_collective(OpKind kind) { return graph::op_def(kind).cpu_collective != nullptr; }

TEST(OpSweep, EveryRegisteredOpAndFusedFormHasACase) {
  for (int k = 0; k < graph::kOpKinds; ++k) {
    const auto kind = static_cast<OpKind>(k);
    const graph::OpDef& def = graph::op_def(kind);
    if (is_collective(kind)) continue;
    EXPECT_NE(def.cpu, nullptr) << graph::op_name(kind) << " has no CPU kernel";
    EXPECT_NE(def.cost, nullptr) << graph::op_name(kind) << " has no cost";
    for (int f = 0; f < graph::kFusedForms; ++f) {
      const auto form = static_cast<Fused>(f);
      if (!def.runs(form)) continue;
      bool found = false;
      for (const SweepCase& c : cases()) found = found || (c.kind == kind && c.fused == form);
      EXPECT_TRUE(found) << graph::op_name(kind) << " (fused: " << graph::fused_name(form)
                         << ") has no case in testing/op_sweep_cases.h";
    }
  }
}

// Every op runs in at least one graph whose gradient is checked: the ops
// with a backward rule as a case's subject (each such case with inputs to
// differentiate checks its gradient), the backward ops and the seed's fill
// as what autodiff emits for them.
TEST(OpSweep, EveryOpRunsInAGradientCheck) {
  std::set<OpKind> checked;
  for (const SweepCase& c : cases()) {
    if (c.fused != Fused::none || !graph::op_def(c.kind).backward) continue;
    const SweepGraph s = build_sweep_graph(c, DType::f64, sweep_seed(c), false);
    const bool differentiable =
        std::any_of(s.inputs.begin(), s.inputs.end(), [](const InputSpec& in) { return in.differentiable(); });
    EXPECT_EQ(c.gradient, differentiable) << c.label << ": a backward rule's case checks its gradient";
    if (!c.gradient) continue;
    const GradientGraph gg = gradient_graph(c, sweep_seed(c));
    for (const graph::Node& n : gg.s.graph.nodes()) checked.insert(n.kind);
  }
  for (int k = 0; k < graph::kOpKinds; ++k) {
    const auto kind = static_cast<OpKind>(k);
    // Its gradients are outputs of its own: linear_cross_entropy_test checks
    // them against finite differences.
    if (is_collective(kind) || kind == OpKind::linear_cross_entropy) continue;
    EXPECT_TRUE(checked.count(kind)) << graph::op_name(kind) << " runs in no gradient check";
  }
}

class EveryOp : public ::testing::TestWithParam<SweepCase> {};

TEST_P(EveryOp, F32MatchesF64) {
  const SweepCase& c = GetParam();
  const SweepGraph f32 = build_sweep_graph(c, DType::f32, sweep_seed(c), true);
  const SweepGraph f64 = build_sweep_graph(c, DType::f64, sweep_seed(c), true);
  ASSERT_TRUE(has_node(f32.graph, c.kind, c.fused)) << "the graph has no " << graph::op_name(c.kind) << " node of form "
                                                    << graph::fused_name(c.fused);
  CpuSweepRun got(f32.graph, f32.inputs, DType::f32), want(f64.graph, f64.inputs, DType::f32);
  got.run();
  want.run();
  for (const Value v : f32.outputs) {
    EXPECT_LE(rel_error(got.read(v), want.read(v)), c.f32_tolerance) << f32.graph.value(v).name;
  }
}

INSTANTIATE_TEST_SUITE_P(OpSweep, EveryOp, ::testing::ValuesIn(cases()), name_of);

class EveryFusedForm : public ::testing::TestWithParam<SweepCase> {};

TEST_P(EveryFusedForm, MatchesTheGraphItWasFusedFrom) {
  const SweepCase& c = GetParam();
  const SweepGraph unfused = build_sweep_graph(c, DType::f32, sweep_seed(c), false);
  const SweepGraph fused = build_sweep_graph(c, DType::f32, sweep_seed(c), true);
  ASSERT_FALSE(has_node(unfused.graph, c.kind, c.fused));
  ASSERT_TRUE(has_node(fused.graph, c.kind, c.fused));
  CpuSweepRun got(fused.graph, fused.inputs, DType::f32), want(unfused.graph, unfused.inputs, DType::f32);
  got.run();
  want.run();
  for (const Value v : fused.outputs) {
    const std::vector<double> g = got.read(v), w = want.read(v);
    if (c.same_bits) {
      EXPECT_EQ(bytes_of(g), bytes_of(w)) << fused.graph.value(v).name;
    } else {
      EXPECT_LE(rel_error(g, w), 1e-6) << fused.graph.value(v).name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OpSweep, EveryFusedForm,
                         ::testing::ValuesIn(cases_where([](const SweepCase& c) { return c.fuse != nullptr; })),
                         name_of);

class EveryBackwardRule : public ::testing::TestWithParam<SweepCase> {};

TEST_P(EveryBackwardRule, MatchesFiniteDifferences) {
  const SweepCase& c = GetParam();
  GradientGraph gg = gradient_graph(c, sweep_seed(c));
  CpuSweepRun run(gg.s.graph, gg.s.inputs, DType::f32);
  for (size_t k = 0; k < gg.s.inputs.size(); ++k) {
    const InputSpec& in = gg.s.inputs[k];
    if (!in.differentiable() || !gg.grads.of.count(in.value.id)) continue;
    run.run();
    const std::vector<double> got = run.read(gg.grads[in.value]);
    std::vector<double> x = run.input(k);
    const std::vector<double> want = numeric_gradient(x, [&] {
      run.set_input(k, x);
      run.run();
      return run.read(gg.loss)[0];
    });
    run.set_input(k, x);
    EXPECT_LE(rel_error(got, want), 1e-6) << gg.s.graph.value(in.value).name;
  }
}

INSTANTIATE_TEST_SUITE_P(OpSweep, EveryBackwardRule,
                         ::testing::ValuesIn(cases_where([](const SweepCase& c) { return c.gradient; })), name_of);

}  // namespace
}  // namespace spillway::testing
