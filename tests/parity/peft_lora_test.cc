// spillway's LoRA against PyPI's peft on transformers' LlamaForCausalLM,
// through the fixture tests/parity/make_peft_fixtures.py wrote (committed
// beside this file): a tiny random base model as transformers saves it, an
// adapter on all seven projections as PEFT saves it (B not zero), and from a
// float64 copy of the adapted model its logits, loss and every adapter
// gradient. spillway reads both folders as they are and runs its LoRA graph
// in float64; the fixture's numbers are stored in float32, and transformers
// rounds a few intermediates to float32 inside its float64 path (see
// make_fixtures.py), which bounds the agreement at about 1e-6 relative
// (measured: logits 6.4e-7, loss 3.4e-8, the worst adapter gradient 4.3e-6).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "model/llama_graph.h"
#include "model/llama_weights_io.h"
#include "model/lora_io.h"
#include "model/safetensors.h"
#include "testing/numeric.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;

const fs::path kFixture = fs::path(__FILE__).parent_path() / "fixtures" / "peft_lora";

std::vector<double> as_doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

TEST(PeftLoraParity, ForwardLossAndAdapterGradientsMatchPeft) {
  const model::LlamaWeights base = model::load_llama((kFixture / "base").string());
  const model::LoraWeights adapters = model::load_peft_adapter((kFixture / "adapter").string(), base.config());
  const model::LoraConfig& lora = adapters.lora();
  EXPECT_EQ(lora.rank, 4);
  EXPECT_EQ(lora.alpha, 12);
  EXPECT_EQ(lora.targets.size(), 7u);  // PEFT lists them in another order; spillway keeps its own
  const SafetensorsFile expected((kFixture / "expected.safetensors").string());
  auto floats = [&](const std::string& name) {
    std::vector<float> v(static_cast<size_t>(expected.tensor(name).shape.numel()));
    expected.read_tensor_as_f32(name, std::span<float>(v));
    return as_doubles(v);
  };
  auto ints = [&](const std::string& name) {
    const SafetensorsTensor& t = expected.tensor(name);
    std::vector<int32_t> v(static_cast<size_t>(t.shape.numel()));
    std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(int32_t));
    return v;
  };
  std::vector<int32_t> tokens = ints("tokens"), targets = ints("targets");
  const Shape& shape = expected.tensor("tokens").shape;

  graph::Graph g;
  graph::Builder b(g, DType::f64);
  const model::LlamaGraph m = model::build_llama(b, base.config(), shape[0], shape[1], {.lora = &lora});
  g.mark_output(m.loss);
  g.mark_output(m.logits);
  const graph::Gradients grads = graph::append_backward(b, m.loss, m.adapters);

  std::vector<std::vector<double>> weights, adapter_values;
  for (const model::NamedTensor& t : base.tensors()) weights.push_back(as_doubles(t.data));
  for (const model::NamedTensor& t : adapters.tensors()) adapter_values.push_back(as_doubles(t.data));
  std::vector<double> scaling(static_cast<size_t>(lora.rank * lora.rank), 0.0);
  for (int64_t i = 0; i < lora.rank; ++i) scaling[static_cast<size_t>(i * lora.rank + i)] = lora.scaling();
  auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
  exec::CpuExecutor e(g, *space);
  e.bind(m.tokens, std::span<int32_t>(tokens));
  e.bind(m.targets, std::span<int32_t>(targets));
  e.bind(m.lora_scaling, std::span<double>(scaling));
  for (size_t i = 0; i < weights.size(); ++i) e.bind(m.parameters[i], std::span<double>(weights[i]));
  for (size_t i = 0; i < adapter_values.size(); ++i) e.bind(m.adapters[i], std::span<double>(adapter_values[i]));
  e.run();

  const std::span<const double> logits = e.read<double>(m.logits);
  EXPECT_LT(testing::rel_error(std::vector<double>(logits.begin(), logits.end()), floats("logits")), 2e-6);
  const double want_loss = floats("loss")[0];
  EXPECT_NEAR(e.read<double>(m.loss)[0], want_loss, 1e-6 * want_loss);
  ASSERT_EQ(adapters.tensors().size(), 28u);
  for (size_t i = 0; i < adapters.tensors().size(); ++i) {
    const std::string& name = adapters.tensors()[i].name;
    const std::span<const double> grad = e.read<double>(grads[m.adapters[i]]);
    EXPECT_LT(testing::rel_error(std::vector<double>(grad.begin(), grad.end()), floats("grad." + name)), 1e-5)
        << name;
  }
}

// What spillway writes reads back as PEFT's own did: the same tensors under
// the same names, and a config PEFT's reader takes (its fields checked in
// tests/model/lora_io_test.cc).
TEST(PeftLoraParity, SpillwaysAdapterFolderHoldsPeftsTensorsByTheirNames) {
  const model::LlamaWeights base = model::load_llama((kFixture / "base").string());
  const model::LoraWeights adapters = model::load_peft_adapter((kFixture / "adapter").string(), base.config());
  const fs::path out = fs::path(::testing::TempDir()) / ("peft_lora_" + std::to_string(::getpid()));
  model::save_peft_adapter(out.string(), adapters, (kFixture / "base").string());
  const SafetensorsFile theirs((kFixture / "adapter" / "adapter_model.safetensors").string());
  const SafetensorsFile ours((out / "adapter_model.safetensors").string());
  ASSERT_EQ(ours.tensors().size(), theirs.tensors().size());
  for (size_t i = 0; i < theirs.tensors().size(); ++i) {
    const SafetensorsTensor& t = theirs.tensors()[i];
    const SafetensorsTensor& o = ours.tensors()[i];
    EXPECT_EQ(o.name, t.name);
    EXPECT_EQ(o.shape, t.shape) << t.name;
    ASSERT_EQ(o.bytes.size(), t.bytes.size()) << t.name;
    EXPECT_EQ(std::memcmp(o.bytes.data(), t.bytes.data(), t.bytes.size()), 0) << t.name;
  }
  fs::remove_all(out);
}

}  // namespace
}  // namespace spillway
