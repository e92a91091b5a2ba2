// LoRA's host memory, known before anything is made: with NF4 the host
// holds the NF4 base, the float32 tensors kept and the projections being
// quantized at once, never the whole model in float32 (a 70B QLoRA base
// fits a host of 125 GiB; its float32 model does not); a run that does not
// fit is refused in one line naming --host-mem with the numbers.
#include "train/lora_host_need.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "base/status.h"
#include "model/llama_config_json.h"
#include "model/qlora_stream.h"
#include "ops/nf4.h"
#include "testing/llama.h"

namespace spillway::train {
namespace {

model::LoraConfig lora(const std::string& targets) {
  return {.rank = 16, .alpha = 32, .targets = model::parse_lora_targets(targets, "test")};
}

constexpr uint64_t kGiB = 1ull << 30;

// What the need counts is what a base made as it is drawn holds.
TEST(LoraHostNeed, CountsWhatABaseQuantizedAsItComesHolds) {
  const model::LlamaConfig c = testing::llama_config(40, 64, 96, 2, 4, 2);
  for (model::LoraBase base : {model::LoraBase::nf4, model::LoraBase::nf4_double}) {
    const model::StreamedBase made = model::random_quantized_base(c, 1, lora("q,v,down"), base);
    const LoraHostNeed need = lora_host_need(c, lora("q,v,down"), base, 4, 1000);
    uint64_t kept = 0, whole = 0, largest = 0;
    for (const model::NamedTensor& t : made.weights.tensors()) {
      kept += t.data.size() * sizeof(float);
      whole += static_cast<uint64_t>(t.shape.numel()) * sizeof(float);
    }
    for (const ops::Nf4Tensor& t : made.quantized.tensors) largest = std::max<uint64_t>(largest, t.numel * 4);
    EXPECT_EQ(need.nf4, made.quantized.bytes());
    EXPECT_EQ(need.kept, kept);
    EXPECT_EQ(need.whole_fp32, whole);
    EXPECT_EQ(need.makers, 4);
    EXPECT_EQ(need.in_flight, 4 * largest);
    EXPECT_EQ(need.runtime, 1000u);
    EXPECT_EQ(need.total(), need.nf4 + need.kept + need.in_flight + need.adapters + need.runtime);
  }
  // More threads than projections quantize them all at once, no more.
  EXPECT_EQ(lora_host_need(c, lora("q"), model::LoraBase::nf4, 64, 0).makers, 2);
}

TEST(LoraHostNeed, A70bQloraBaseFitsAHostItsFloat32ModelDoesNot) {
  const model::LlamaConfig c = model::preset_config("llama3-70b");
  const LoraHostNeed q = lora_host_need(c, lora("all"), model::LoraBase::nf4, 16, 4 * kGiB);
  EXPECT_GT(q.whole_fp32, 250 * kGiB);
  EXPECT_GT(q.nf4, 30 * kGiB);
  EXPECT_LT(q.nf4, 40 * kGiB);
  EXPECT_LT(q.kept, 8 * kGiB);  // embedding, head (7.83 GiB), norms
  EXPECT_LT(q.total(), 80 * kGiB);
  EXPECT_NO_THROW(check_lora_host_fits(q, 125 * kGiB, model::LoraBase::nf4, "--host-mem"));
  const std::string line = q.describe(model::LoraBase::nf4);
  EXPECT_NE(line.find("never the whole model's"), std::string::npos) << line;

  const LoraHostNeed plain = lora_host_need(c, lora("all"), model::LoraBase::weights, 16, 4 * kGiB);
  EXPECT_EQ(plain.kept, plain.whole_fp32);
  try {
    check_lora_host_fits(plain, 125 * kGiB, model::LoraBase::weights, "--host-mem");
    FAIL() << "a 70B float32 base fits 125 GiB?";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("--host-mem: LoRA's host memory needs "), 0u) << what;
    EXPECT_NE(what.find("), more than the budget of 125.00 GiB (--host-mem); --lora-base nf4 keeps the base 4-bit"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_THROW(check_lora_host_fits(q, 40 * kGiB, model::LoraBase::nf4, "--host-mem"), Error);
}

}  // namespace
}  // namespace spillway::train
