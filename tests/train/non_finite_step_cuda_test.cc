// The GPU engine skips the update of a step whose loss is not finite
// (testing/non_finite_step.h): in the replayed one-stream layout and in the
// planned one that streams AdamW's state from home.
#include "device/cuda/cuda_device.h"
#include "testing/non_finite_step.h"

namespace spillway::train {
namespace {

TEST(NonFiniteStep, CudaEngineSkipsTheUpdate) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = testing::llama_config(1000, 256, 512, 2, 4, 2, /*tied=*/false);
  for (const OffloadMode offload : {OffloadMode::off, OffloadMode::on}) {
    SCOPED_TRACE(offload == OffloadMode::off ? "on the device" : "offloaded");
    testing::expect_non_finite_step_skipped(config, 2, 64, [&](model::LlamaWeights& w, AdamW& o) {
      EngineOptions options;
      options.batch = 2;
      options.seq = 64;
      options.device = DeviceChoice::cuda;
      options.memory.offload = offload;
      return make_cuda_engine(w, o, options);
    });
  }
}

}  // namespace
}  // namespace spillway::train
