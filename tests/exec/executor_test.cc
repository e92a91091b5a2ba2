#include "exec/executor.h"

#include <gtest/gtest.h>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "graph/autodiff.h"
#include "model/llama_graph.h"
#include "testing/numeric.h"

namespace spillway::exec {
namespace {

using graph::Value;

model::LlamaConfig small_config() {
  model::LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  return c;
}

struct Step {
  graph::Graph graph;
  model::LlamaGraph model;
  std::vector<int32_t> tokens, targets;
  std::vector<std::vector<float>> params;
};

void build_step(Step& s, int64_t batch, int64_t seq) {
  graph::Builder b(s.graph, DType::f32);
  s.model = model::build_llama(b, small_config(), batch, seq);
  s.graph.mark_output(s.model.loss);
  graph::append_backward(b, s.model.loss, s.model.parameters);
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

}  // namespace
}  // namespace spillway::exec
