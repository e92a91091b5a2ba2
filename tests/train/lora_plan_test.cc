// The GPU LoRA engine's plan, without a GPU: what it refuses, where its base
// and adapters lie and what they take, the step's device need and the line
// that says it does not fit, and LoRA's FLOPs per token.
#include "train/lora_plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "model/llama_config_json.h"
#include "model/qlora.h"
#include "ops/nf4.h"
#include "testing/llama.h"
#include "testing/numeric.h"
#include "train/device_reserve.h"

namespace spillway::train {
namespace {

model::LlamaConfig small() { return testing::llama_config(1000, 256, 512, 2, 4, 2, true); }

model::LoraConfig lora(const std::string& targets) {
  return {.rank = 8, .alpha = 16, .targets = model::parse_lora_targets(targets, "test")};
}

// A group the refusals only look at; none of its collectives runs.
class UnusedGroup final : public Communicator {
 public:
  UnusedGroup() : Communicator(0, 2) {}
  void all_reduce_sum(void*, uint64_t, DType, Stream&) override { unused(); }
  void reduce_scatter_sum(const void*, void*, uint64_t, DType, Stream&) override { unused(); }
  void all_gather(const void*, void*, uint64_t, DType, Stream&) override { unused(); }
  void broadcast(void*, uint64_t, DType, int, Stream&) override { unused(); }
  void send(const void*, uint64_t, DType, int, Stream&) override { unused(); }
  void recv(void*, uint64_t, DType, int, Stream&) override { unused(); }
  void exchange(std::span<const PeerBuffer>, std::span<const PeerBuffer>, DType, Stream&) override { unused(); }
  void wait(Stream&) override { unused(); }

 private:
  static void unused() { FAIL() << "a refusal ran a collective"; }
};

std::string refusal(const EngineOptions& o) {
  try {
    check_gpu_lora_options(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LoraPlan, RefusesWhatTheGpuEngineDoesNotSupportInOneLine) {
  const auto config = small();
  LoraState state = LoraState::fresh(config, lora("all"), 1);
  UnusedGroup group;
  EngineOptions o;
  o.lora = &state;
  EXPECT_EQ(refusal(o), "");
  o.data_parallel = &group;  // data parallelism is supported: the adapters are replicated
  EXPECT_EQ(refusal(o), "");
  auto refused = [&](auto change, const std::string& flag) {
    EngineOptions bad = o;
    change(bad);
    const std::string line = refusal(bad);
    EXPECT_EQ(line.rfind(flag + ": ", 0), 0u) << line;
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  };
  refused([&](EngineOptions& b) { b.tensor_parallel = &group; }, "--tp");
  refused([&](EngineOptions& b) { b.pipeline_parallel = &group; }, "--pp");
  refused([&](EngineOptions& b) { b.context_parallel = &group; }, "--cp");
  refused([](EngineOptions& b) { b.shard = StateSharding::optimizer; }, "--shard optimizer");
  refused([](EngineOptions& b) { b.memory.offload = plan::OffloadMode::on; }, "--offload");
  refused([](EngineOptions& b) { b.memory.bf16_moments = true; }, "--bf16-moments");
  refused([](EngineOptions& b) { b.memory.recompute = RecomputeChoice::selective; }, "--recompute");
  refused([](EngineOptions& b) { b.kernels.projections = ProjectionMode::fused; }, "--projections fused");
}

TEST(LoraPlan, TheBaseLiesInBf16AndTheTargetedProjectionsInNf4) {
  const auto config = small();
  const auto specs = model::parameter_specs(config);
  uint64_t all_bf16 = 0;
  for (const auto& s : specs) all_bf16 += static_cast<uint64_t>(s.shape.numel()) * 2;
  const LoraBaseLayout plain = lora_base_layout(config, lora("q,v"), model::LoraBase::weights);
  EXPECT_GE(plain.bf16_bytes, all_bf16);
  EXPECT_LT(plain.bf16_bytes, all_bf16 + 256 * specs.size());  // alignment alone
  EXPECT_EQ(plain.nf4_bytes + plain.scratch_bytes, 0u);

  for (model::LoraBase base : {model::LoraBase::nf4, model::LoraBase::nf4_double}) {
    SCOPED_TRACE(std::string(model::lora_base_name(base)));
    const LoraBaseLayout q = lora_base_layout(config, lora("q,v"), base);
    uint64_t nf4 = 0, kept = 0;
    int quantized = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const bool targeted = specs[i].name.ends_with("q_proj.weight") || specs[i].name.ends_with("v_proj.weight");
      EXPECT_EQ(q.tensors[i].nf4, targeted) << specs[i].name;
      const auto n = specs[i].shape.numel();
      if (targeted) {
        nf4 += ops::nf4_stored_bytes(n, base == model::LoraBase::nf4_double);
        ++quantized;
      } else {
        kept += static_cast<uint64_t>(n) * 2;
      }
    }
    EXPECT_EQ(quantized, 4);  // q and v of two layers
    EXPECT_GE(q.nf4_bytes, nf4);
    EXPECT_LT(q.nf4_bytes, nf4 + 3 * 256 * 4);
    EXPECT_GE(q.bf16_bytes, kept);
    EXPECT_LT(q.bf16_bytes, kept + 256 * specs.size());
    EXPECT_EQ(q.scratch_bytes, 256u * 256 * 2);  // the largest targeted weight (q: 256 x 256), bf16
    // What a quantized base keeps is what the layout counts, less alignment.
    auto weights = model::LlamaWeights::random(config, 3, 0.05);
    EXPECT_EQ(model::quantize_lora_base(weights, lora("q,v"), base).bytes(), nf4);
  }
}

TEST(LoraPlan, AdaptersAreLaidOutAlignedWithSixteenBytesAnElement) {
  const auto config = small();
  const LoraAdapterLayout a = lora_adapter_layout(config, lora("all"));
  const auto specs = model::lora_specs(config, lora("all"));
  ASSERT_EQ(a.offsets.size(), specs.size());
  uint64_t numel = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(a.offsets[i] % 128, 0u) << specs[i].name;
    if (i + 1 < specs.size()) {
      EXPECT_GE(a.offsets[i + 1] - a.offsets[i], static_cast<uint64_t>(specs[i].shape.numel()));
    }
    numel += static_cast<uint64_t>(specs[i].shape.numel());
  }
  EXPECT_GE(a.elements, numel);
  EXPECT_EQ(a.bytes(), a.elements * 16);  // bf16 working, master's low half, fp32 gradient, m and v
}

TEST(LoraPlan, TheStepsNeedIsCheckedUpFrontInOneLine) {
  const auto config = small();
  const model::LoraConfig l = lora("all");
  const auto train = build_lora_step(config, l, 2, 64, true, false, false, graph::RecomputePolicy::none);
  const auto eval = build_lora_step(config, l, 2, 64, false, false, false, graph::RecomputePolicy::none);
  // The frozen weights are inputs: only the adapters have gradients.
  EXPECT_EQ(train->step.grads.of.size(), train->model.adapters.size());
  const auto remade = build_lora_step(config, l, 2, 64, true, false, false, graph::RecomputePolicy::layers);
  const LoraBaseLayout base = lora_base_layout(config, l, model::LoraBase::nf4);
  const LoraAdapterLayout adapters = lora_adapter_layout(config, l);
  const uint64_t budget = 80ull << 30;
  const LoraDeviceNeed need =
      lora_device_need(base, adapters, train->step.graph, eval->step.graph, 100ull << 20, budget);
  EXPECT_EQ(need.base, base.bytes());
  EXPECT_EQ(need.adapters, adapters.bytes());
  EXPECT_GT(need.activations, 0u);
  EXPECT_EQ(need.other, (100ull << 20) + budget / 100);
  const LoraDeviceNeed less =
      lora_device_need(base, adapters, remade->step.graph, eval->step.graph, 100ull << 20, budget);
  EXPECT_LT(less.activations, need.activations) << "recomputing layers keeps fewer values";

  EXPECT_NO_THROW(check_lora_fits(need, need.total(), model::LoraBase::nf4, false));
  try {
    check_lora_fits(need, need.total() - 1, model::LoraBase::weights, false);
    ADD_FAILURE() << "a step one byte over the budget fits";
  } catch (const Error& e) {
    const std::string line = e.what();
    EXPECT_EQ(line.rfind("--device-mem: a LoRA step needs ", 0), 0u) << line;
    for (const char* part : {"base ", "adapters' state ", "activations ", "--recompute layers", "--lora-base nf4"}) {
      EXPECT_NE(line.find(part), std::string::npos) << part << " in " << line;
    }
  }
}

// QLoRA's scratch as the GPU runs it, on the CPU executor: every NF4 weight
// bound to one array and dequantized into it just before each node that
// reads it (nf4_reads_by_node) gives the loss and adapter gradients of the
// round trip bound in place, bit for bit, with and without recomputation.
// Each targeted weight is read by its forward product, by the backward's
// product for the input's gradient where one is needed, and once more
// where its layer is recomputed.
TEST(LoraPlan, QlorasScratchGivesTheBitsOfTheWeightsInPlace) {
  const auto config = small();
  const model::LoraConfig l = lora("all");
  auto weights = model::LlamaWeights::random(config, 3, 0.05);
  const model::QuantizedBase q = model::quantize_lora_base(weights, l, model::LoraBase::nf4);  // weights: round trip
  std::map<std::string, size_t> stored;
  for (size_t i = 0; i < q.names.size(); ++i) stored[q.names[i]] = i;
  model::LoraWeights adapters = model::LoraWeights::init(config, l, 5);
  for (size_t i = 0; i < adapters.tensors().size(); ++i) {  // B non-zero too, so that A has gradients
    auto& t = adapters.tensors()[i];
    if (t.name.ends_with("lora_B.weight")) t.data = testing::random_vector<float>(t.shape.numel(), 40 + i, -0.1, 0.1);
  }
  const LoraBaseLayout base = lora_base_layout(config, l, model::LoraBase::nf4);
  const int64_t batch = 2, seq = 16;
  std::vector<int32_t> tokens, targets;
  for (double x : testing::random_vector(2 * batch * seq, 9, 0, 1000)) tokens.push_back(static_cast<int32_t>(x));
  targets.assign(tokens.begin() + batch * seq, tokens.end());
  tokens.resize(static_cast<size_t>(batch * seq));
  const auto r = static_cast<size_t>(l.rank);
  std::vector<float> scaling(r * r, 0.0f);
  for (size_t i = 0; i < r; ++i) scaling[i * r + i] = static_cast<float>(l.scaling());

  for (graph::RecomputePolicy recompute : {graph::RecomputePolicy::none, graph::RecomputePolicy::layers}) {
    SCOPED_TRACE(std::string(graph::recompute_policy_name(recompute)));
    const auto step = build_llama_step(config, batch, seq, false, {.backward = true, .recompute = recompute},
                                       DType::f32, false, false, {}, {}, {}, &l);
    const model::LlamaGraph& m = step->model;
    const std::vector<int> reads = nf4_reads_by_node(*step, base);
    std::map<int, int> readers;
    for (int t : reads) {
      if (t >= 0) ++readers[t];
    }
    EXPECT_EQ(readers.size(), 14u);  // seven projections of two layers
    for (const auto& [t, n] : readers) {
      // Layer 0's q, k and v read the embedding's norm: nothing below them
      // trains, so autodiff makes no input gradient there.
      const std::string& name = weights.tensors()[static_cast<size_t>(t)].name;
      const bool first_qkv = name.starts_with("model.layers.0.self_attn.") && !name.ends_with("o_proj.weight");
      // Recomputing a layer reads its weights once more, but down's: its
      // product ends the layer, which is kept.
      const bool remade = recompute == graph::RecomputePolicy::layers && !name.ends_with("down_proj.weight");
      EXPECT_EQ(n, (first_qkv ? 1 : 2) + (remade ? 1 : 0)) << name;
    }

    auto run = [&](bool scratch) {
      auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
      exec::CpuExecutor e(step->step.graph, *space);
      std::vector<float> room(256 * 512);  // the largest projection: gate, up and down
      e.bind(m.tokens, std::span<int32_t>(tokens));
      e.bind(m.targets, std::span<int32_t>(targets));
      for (size_t j = 0; j < m.parameters.size(); ++j) {
        const auto t = static_cast<size_t>(m.parameter_parts[j].front());
        const bool nf4 = base.tensors[t].nf4;
        e.bind(m.parameters[j], scratch && nf4 ? static_cast<void*>(room.data())
                                               : static_cast<void*>(weights.tensors()[t].data.data()));
      }
      std::vector<std::vector<float>> grads;
      for (size_t i = 0; i < m.adapters.size(); ++i) {
        e.bind(m.adapters[i], std::span<float>(adapters.tensors()[i].data));
        grads.emplace_back(adapters.tensors()[i].data.size(), 0.0f);
      }
      for (size_t i = 0; i < m.adapters.size(); ++i) {
        e.bind(step->step.grads[m.adapters[i]], std::span<float>(grads[i]));
      }
      e.bind(m.lora_scaling, std::span<float>(scaling));
      if (scratch) {
        e.set_before_node([&](size_t node) {
          const int t = reads[node];
          if (t < 0) return;
          const ops::Nf4Tensor& w = q.tensors[stored.at(weights.tensors()[static_cast<size_t>(t)].name)];
          w.dequantize(std::span<float>(room.data(), static_cast<size_t>(w.numel)));
        });
      }
      e.run();
      grads.push_back({e.read<float>(m.loss)[0]});
      return grads;
    };
    const auto in_place = run(false);
    EXPECT_EQ(run(true), in_place);
    EXPECT_NE(in_place.front(), std::vector<float>(in_place.front().size(), 0.0f)) << "A should have a gradient";
  }
}

// The bench's shape (bench/gpu_lora.sh): rank 16 on all seven projections
// of LLaMA-3-8B at seq 4096. The NF4 base takes under 40% of the bf16 one
// (the embedding and the head stay bf16); the activations are the same.
TEST(LoraPlan, Llama3_8BNeedsLessWithAnNf4Base) {
  const model::LlamaConfig config = model::resolve_config("llama3-8b");
  const model::LoraConfig l = {.rank = 16, .alpha = 32, .targets = model::parse_lora_targets("all", "test")};
  const auto train = build_lora_step(config, l, 1, 4096, true, false, false, graph::RecomputePolicy::none);
  const auto eval = build_lora_step(config, l, 1, 4096, false, false, false, graph::RecomputePolicy::none);
  const uint64_t budget = 139ull << 30;
  const LoraAdapterLayout adapters = lora_adapter_layout(config, l);
  const uint64_t workspaces = estimated_kernel_workspaces(train->step.graph, true);
  const LoraDeviceNeed bf16 = lora_device_need(lora_base_layout(config, l, model::LoraBase::weights), adapters,
                                               train->step.graph, eval->step.graph, workspaces, budget);
  const LoraDeviceNeed nf4 = lora_device_need(lora_base_layout(config, l, model::LoraBase::nf4), adapters,
                                              train->step.graph, eval->step.graph, workspaces, budget);
  std::printf("LLaMA-3-8B LoRA r16 all, seq 4096: %s = %.2f GiB\n",
              bf16.describe(model::LoraBase::weights).c_str(), static_cast<double>(bf16.total()) / (1ull << 30));
  std::printf("LLaMA-3-8B QLoRA nf4 r16 all, seq 4096: %s = %.2f GiB\n", nf4.describe(model::LoraBase::nf4).c_str(),
              static_cast<double>(nf4.total()) / (1ull << 30));
  EXPECT_LT(static_cast<double>(nf4.base), 0.4 * static_cast<double>(bf16.base));
  EXPECT_EQ(nf4.activations, bf16.activations);
  EXPECT_EQ(bf16.adapters, adapters.bytes());
}

TEST(LoraPlan, FlopsPerTokenCountTheFrozenMatricesTwiceLess) {
  const auto config = small();
  const model::LoraConfig l = lora("all");
  double adapters = 0;
  for (const auto& s : model::lora_specs(config, l)) adapters += static_cast<double>(s.shape.numel());
  const double full = model::training_flops_per_token(config, 64);
  EXPECT_DOUBLE_EQ(lora_training_flops_per_token(config, l, 64),
                   full - 2.0 * static_cast<double>(model::matmul_parameter_count(config)) + 6.0 * adapters);
}

}  // namespace
}  // namespace spillway::train
