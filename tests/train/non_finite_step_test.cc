// The CPU engine skips the update of a step whose loss is not finite
// (testing/non_finite_step.h), with the plain executor and under a device
// budget that plans the step.
#include "testing/non_finite_step.h"

namespace spillway::train {
namespace {

TEST(NonFiniteStep, CpuEngineSkipsTheUpdate) {
  const auto config = testing::llama_config(64, 32, 48, 2, 4, 2, /*tied=*/false);
  for (const uint64_t device_mem : {uint64_t{0}, uint64_t{2} << 20}) {
    SCOPED_TRACE("device budget " + std::to_string(device_mem));
    testing::expect_non_finite_step_skipped(config, 2, 16, [&](model::LlamaWeights& w, AdamW& o) {
      EngineOptions options;
      options.batch = 2;
      options.seq = 16;
      options.device = DeviceChoice::cpu;
      options.memory.device_mem = device_mem;
      return make_cpu_engine(w, o, options);
    });
  }
}

}  // namespace
}  // namespace spillway::train
