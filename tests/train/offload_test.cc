// Training under a device budget of a quarter of the training state: the
// same losses and weights, bit for bit, as with no budget, and the device
// allocator's peak stays under the budget.
#include <gtest/gtest.h>

#include <cstring>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "train/engine.h"
#include "train/train_step.h"
#include "testing/llama.h"

namespace spillway::train {
namespace {

model::LlamaConfig config() {
  return testing::llama_config(256, 96, 128, 4, 4, 2);
}

std::vector<int32_t> tokens(size_t n, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 131 + seed * 17 + (i * i) % 7) % 256);
  return t;
}

TEST(Offload, QuarterOfTheTrainingStateGivesBitIdenticalSteps) {
  EngineOptions free_opts;
  free_opts.batch = 2;
  free_opts.seq = 64;
  auto w_free = model::LlamaWeights::random(config(), 1, 0.1);
  auto w_tight = w_free;
  // Weights, gradients and the two AdamW moments, all fp32.
  const uint64_t training_state = static_cast<uint64_t>(w_free.numel()) * 4 * 4;
  EngineOptions tight_opts = free_opts;
  tight_opts.memory.device_mem = training_state / 4;

  AdamW o_free(config()), o_tight(config());
  auto free_engine = make_cpu_engine(w_free, o_free, free_opts);
  auto tight_engine = make_cpu_engine(w_tight, o_tight, tight_opts);
  EXPECT_NE(tight_engine->description().find("values offloaded"), std::string::npos) << tight_engine->description();

  for (int step = 0; step < 3; ++step) {
    // Step 1 accumulates 2 micro-batches into the caller's gradient buffers,
    // which the planned step loads, adds to on the device, and stores back.
    const int64_t micro = step == 1 ? 2 : 1;
    auto in = tokens(128 * micro, step), out = tokens(128 * micro, step + 100);
    StepStats a = free_engine->train_step(in, out, micro, 1e-2);
    StepStats b = tight_engine->train_step(in, out, micro, 1e-2);
    EXPECT_EQ(a.loss, b.loss) << "step " << step;
    EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << step;
  }
  for (size_t i = 0; i < w_free.tensors().size(); ++i) {
    const auto& a = w_free.tensors()[i].data;
    const auto& b = w_tight.tensors()[i].data;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << w_free.tensors()[i].name;
  }
  EXPECT_LE(tight_engine->peak_device_bytes(), tight_opts.memory.device_mem);
  EXPECT_GT(free_engine->peak_device_bytes(), tight_opts.memory.device_mem);
}

TEST(Offload, MeasuredPeakIsThePlannedPeak) {
  auto device = make_cpu_device(600'000);
  TrainStep step(config(), 2, 64, *device, true);
  auto weights = model::LlamaWeights::random(config(), 2);
  auto in = tokens(128, 1), out = tokens(128, 2);
  step.run(weights, in, out);
  ASSERT_NE(step.placement(), nullptr);
  MemorySpace& space = device->device_memory();
  EXPECT_EQ(space.peak(), step.placement()->device_peak);
  EXPECT_LE(space.peak(), 600'000u);
  EXPECT_EQ(space.in_use(), 0u);  // everything went home or died
}

TEST(Offload, BudgetBelowTheMinimumFailsBeforeAnyWork) {
  EngineOptions o;
  o.batch = 2;
  o.seq = 64;
  o.memory.device_mem = 10'000;
  auto w = model::LlamaWeights::random(config(), 1);
  AdamW opt(config());
  try {
    make_cpu_engine(w, opt, o);
    FAIL() << "expected the planner to refuse";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("below this step's minimum of"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spillway::train
