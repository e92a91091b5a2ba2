#include "exec/executor.h"

#include <gtest/gtest.h>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "graph/autodiff.h"
#include "model/llama_graph.h"
#include "ops/add_op.h"
#include "ops/embedding_op.h"
#include "ops/fill_op.h"
#include "ops/matmul_op.h"
#include "ops/rmsnorm_op.h"
#include "testing/llama.h"
#include "testing/numeric.h"

namespace spillway::exec {
namespace {

using graph::Value;

model::LlamaConfig small_config() {
  return testing::llama_config(64, 32, 48, 3, 4, 2);
}

struct Step {
  graph::Graph graph;
  model::LlamaGraph model;
  std::vector<int32_t> tokens, targets;
  std::vector<std::vector<float>> params;
  graph::Gradients grads;
};

void build_step(Step& s, int64_t batch, int64_t seq,
                graph::GradientOutput gradients = graph::GradientOutput::fresh) {
  graph::Builder b(s.graph, DType::f32);
  s.model = model::build_llama(b, small_config(), batch, seq);
  s.graph.mark_output(s.model.loss);
  s.grads = graph::append_backward(b, s.model.loss, s.model.parameters, gradients);
  auto r = testing::random_vector(batch * seq, 3, 0, 64);
  for (double x : r) s.tokens.push_back(static_cast<int32_t>(x));
  s.targets = s.tokens;
  std::rotate(s.targets.begin(), s.targets.begin() + 1, s.targets.end());
  for (size_t i = 0; i < s.model.parameters.size(); ++i) {
    s.params.push_back(testing::random_vector<float>(s.graph.value(s.model.parameters[i]).shape.numel(), 50 + i, -0.2, 0.2));
  }
}

void bind_all(CpuExecutor& e, Step& s) {
  e.bind(s.model.tokens, std::span<int32_t>(s.tokens));
  e.bind(s.model.targets, std::span<int32_t>(s.targets));
  for (size_t i = 0; i < s.params.size(); ++i) e.bind(s.model.parameters[i], std::span<float>(s.params[i]));
}

TEST(CpuExecutor, MeasuredPeakEqualsPredictedPeak) {
  Step s;
  build_step(s, 2, 24);
  auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  CpuExecutor e(s.graph, *space);
  bind_all(e, s);
  for (int step = 0; step < 2; ++step) {
    space->reset_peak();
    e.run();
    ASSERT_GT(e.liveness().peak_bytes, 0u);
    // Outputs of the previous step are freed when the next one starts, so the
    // peak of every step is the same.
    EXPECT_EQ(space->peak(), e.liveness().peak_bytes) << "step " << step;
  }
  // Only the outputs (loss and one gradient per parameter) remain allocated.
  EXPECT_EQ(space->allocation_count(), s.graph.outputs().size());
}

TEST(CpuExecutor, RunsUnderABudgetOfExactlyThePeakAndFailsBelowIt) {
  Step s;
  build_step(s, 1, 16);
  uint64_t peak;
  {
    auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
    CpuExecutor e(s.graph, *space);
    peak = e.liveness().peak_bytes;
  }
  auto exact = make_host_heap_space("cpu:device", peak);
  CpuExecutor fits(s.graph, *exact);
  bind_all(fits, s);
  EXPECT_NO_THROW(fits.run());

  auto tight = make_host_heap_space("cpu:device", peak - MemorySpace::kAlignment);
  CpuExecutor fails(s.graph, *tight);
  bind_all(fails, s);
  EXPECT_THROW(fails.run(), Error);
  EXPECT_EQ(tight->in_use(), 0u);  // nothing half-allocated is left behind
}

TEST(CpuExecutor, UnboundParameterIsNamed) {
  Step s;
  build_step(s, 1, 4);
  auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  CpuExecutor e(s.graph, *space);
  try {
    e.run();
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("tokens: input or parameter was not bound"), std::string::npos) << err.what();
  }
}

TEST(CpuExecutor, StepsAreDeterministic) {
  Step s;
  build_step(s, 2, 9);
  auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  CpuExecutor e(s.graph, *space);
  bind_all(e, s);
  e.run();
  std::vector<float> first(e.read<float>(s.graph.outputs()[3]).begin(), e.read<float>(s.graph.outputs()[3]).end());
  float loss = e.read<float>(s.model.loss)[0];
  e.run();
  EXPECT_EQ(loss, e.read<float>(s.model.loss)[0]);
  auto again = e.read<float>(s.graph.outputs()[3]);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), again.begin()));
}

// One node of every kind that can accumulate, its output either fresh or
// accumulated into the caller's buffer.
struct AccumulatingNodes {
  graph::Graph graph;
  std::vector<Value> results;  // dweight, matmul, embedding_backward, add, fill(0)
  Value x, w, dy, a, b, ids, dout, p, q;

  explicit AccumulatingNodes(bool accumulate) {
    graph::Builder bld(graph, DType::f32);
    x = bld.input("x", Shape{5, 6}, DType::f32);
    w = bld.parameter("w", Shape{6});
    dy = bld.input("dy", Shape{5, 6}, DType::f32);
    a = bld.input("a", Shape{5, 6}, DType::f32);
    b = bld.input("b", Shape{5, 4}, DType::f32);
    ids = bld.input("ids", Shape{7}, DType::i32);
    dout = bld.input("dout", Shape{7, 3}, DType::f32);
    p = bld.input("p", Shape{8}, DType::f32);
    q = bld.input("q", Shape{8}, DType::f32);
    ops::rmsnorm(bld, x, w, 1e-5, "norm");
    results.push_back(ops::rmsnorm_backward(bld, dy, x, w, graph.find("norm.rstd"), "norm.backward")[1]);
    results.push_back(ops::matmul(bld, a, b, true, false, "dw"));
    results.push_back(ops::embedding_backward(bld, ids, dout, 9, "dtable"));
    results.push_back(ops::add(bld, p, q, "sum"));
    results.push_back(ops::fill(bld, "zeros", Shape{3}, 0.0, DType::f32));
    for (Value v : results) {
      if (accumulate) {
        graph.mark_accumulated(v);
      } else {
        graph.mark_output(v);
      }
    }
  }
};

struct AccumulatingInputs {
  std::vector<float> x = testing::random_vector<float>(30, 1), w = testing::random_vector<float>(6, 2, 0.5, 1.5),
                     dy = testing::random_vector<float>(30, 3), a = testing::random_vector<float>(30, 4),
                     b = testing::random_vector<float>(20, 5), dout = testing::random_vector<float>(21, 6),
                     p = testing::random_vector<float>(8, 7), q = testing::random_vector<float>(8, 8);
  std::vector<int32_t> ids = {3, 0, 3, 8, 1, 3, 0};  // rows 2, 4..7 unused

  void bind(StepProgram& e, const AccumulatingNodes& n) {
    e.bind(n.x, std::span<float>(x));
    e.bind(n.w, std::span<float>(w));
    e.bind(n.dy, std::span<float>(dy));
    e.bind(n.a, std::span<float>(a));
    e.bind(n.b, std::span<float>(b));
    e.bind(n.ids, std::span<int32_t>(ids));
    e.bind(n.dout, std::span<float>(dout));
    e.bind(n.p, std::span<float>(p));
    e.bind(n.q, std::span<float>(q));
  }
};

TEST(CpuExecutor, AccumulatedValuesAreAddedToAndNeverAllocated) {
  AccumulatingInputs in;
  AccumulatingNodes fresh_nodes(false), acc_nodes(true);
  auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  CpuExecutor fresh(fresh_nodes.graph, *space);
  in.bind(fresh, fresh_nodes);
  fresh.run();
  std::vector<std::vector<float>> result;
  for (Value v : fresh_nodes.results) result.emplace_back(fresh.read<float>(v).begin(), fresh.read<float>(v).end());

  auto acc_space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  CpuExecutor acc(acc_nodes.graph, *acc_space);
  in.bind(acc, acc_nodes);
  // The caller's buffers hold a running sum already: it must be added to.
  std::vector<std::vector<float>> buffers, old;
  for (size_t i = 0; i < acc_nodes.results.size(); ++i) {
    buffers.push_back(testing::random_vector<float>(static_cast<int64_t>(result[i].size()), 20 + i, -2, 2));
    acc.bind(acc_nodes.results[i], std::span<float>(buffers[i]));
  }
  old = buffers;
  for (int step = 1; step <= 2; ++step) {
    acc.run();
    for (size_t i = 0; i < buffers.size(); ++i) {
      const std::string what = acc_nodes.graph.value(acc_nodes.results[i]).name + ", step " + std::to_string(step);
      EXPECT_EQ(acc.data(acc_nodes.results[i]), buffers[i].data()) << what;
      std::vector<double> want(old[i].size());
      for (size_t j = 0; j < want.size(); ++j) want[j] = static_cast<double>(old[i][j]) + step * result[i][j];
      EXPECT_LE(testing::rel_error(buffers[i], want), 1e-6) << what;
    }
    // Step 1 is exactly old + result where each kernel adds its rounded result.
    if (step == 1) {
      for (size_t i : {size_t{0}, size_t{2}, size_t{3}, size_t{4}}) {
        for (size_t j = 0; j < old[i].size(); ++j) ASSERT_EQ(buffers[i][j], old[i][j] + result[i][j]) << i;
      }
    }
    // Nothing of the program's own outlives the step: every output is the caller's.
    EXPECT_EQ(acc_space->allocation_count(), 0u);
    EXPECT_EQ(acc_space->in_use(), 0u);
  }
  for (Value v : acc_nodes.results) EXPECT_FALSE(acc.liveness().of[static_cast<size_t>(v.id)].managed);
  EXPECT_LT(acc.liveness().peak_bytes, fresh.liveness().peak_bytes);
  EXPECT_EQ(acc_space->peak(), acc.liveness().peak_bytes);
}

TEST(CpuExecutor, AccumulatedValueMustBeBound) {
  AccumulatingInputs in;
  AccumulatingNodes nodes(true);
  auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  CpuExecutor e(nodes.graph, *space);
  in.bind(e, nodes);
  try {
    e.run();
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("norm.backward.dweight: accumulated value was not bound"), std::string::npos)
        << err.what();
  }
  AccumulatingNodes fresh(false);
  CpuExecutor f(fresh.graph, *space);
  EXPECT_THROW(f.bind(fresh.results[0], nullptr), Error);  // computed values stay the executor's
}

// A whole training step with accumulated parameter gradients: two runs add
// twice the gradient of one fresh run, and only the loss is allocated.
TEST(CpuExecutor, TrainingStepAccumulatesParameterGradients) {
  Step fresh_step, acc_step;
  build_step(fresh_step, 2, 8);
  build_step(acc_step, 2, 8, graph::GradientOutput::accumulated);
  auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  CpuExecutor fresh(fresh_step.graph, *space);
  bind_all(fresh, fresh_step);
  fresh.run();
  auto acc_space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  CpuExecutor acc(acc_step.graph, *acc_space);
  bind_all(acc, acc_step);
  const auto& params = acc_step.model.parameters;
  std::vector<std::vector<float>> grads;
  for (Value p : params) grads.emplace_back(static_cast<size_t>(acc_step.graph.value(p).shape.numel()), 0.0f);
  for (size_t i = 0; i < params.size(); ++i) acc.bind(acc_step.grads[params[i]], std::span<float>(grads[i]));
  acc.run();
  acc.run();
  EXPECT_EQ(acc.read<float>(acc_step.model.loss)[0], fresh.read<float>(fresh_step.model.loss)[0]);
  EXPECT_EQ(acc_space->allocation_count(), 1u);  // the loss
  EXPECT_LT(acc.liveness().peak_bytes, fresh.liveness().peak_bytes);
  for (size_t i = 0; i < params.size(); ++i) {
    auto want_f = fresh.read<float>(fresh_step.grads[fresh_step.model.parameters[i]]);
    ASSERT_EQ(want_f.size(), grads[i].size());
    std::vector<double> want(want_f.begin(), want_f.end());
    for (double& x : want) x *= 2;
    EXPECT_LE(testing::rel_error(grads[i], want), 1e-6) << acc_step.graph.value(params[i]).name;
  }
}

}  // namespace
}  // namespace spillway::exec
